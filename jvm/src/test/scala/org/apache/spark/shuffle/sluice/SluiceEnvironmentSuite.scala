package org.apache.spark.shuffle.sluice

import io.sluice.NettyLeakDetection
import io.sluice.config.SluiceOptions
import org.apache.spark.SparkConf
import org.scalatest.funsuite.AnyFunSuite

/** How the executor's engine settings follow Spark's own. */
class SluiceEnvironmentSuite extends AnyFunSuite with NettyLeakDetection {

  private def heartbeat(settings: (String, String)*): Long =
    SluiceEnvironment.engineConf(new SparkConf(false).setAll(settings)).get(SluiceOptions.HeartbeatTimeout)

  test("the heartbeat timeout follows spark.network.timeout unless Sluice's own option is set") {
    assert(heartbeat() == 120000L, "Spark's default spark.network.timeout")
    assert(heartbeat("spark.network.timeout" -> "30s") == 30000L)
    assert(heartbeat("spark.network.timeout" -> "30s", SluiceOptions.HeartbeatTimeout.key -> "5s") == 5000L)
    assert(heartbeat("spark.network.timeout" -> "45s", SluiceOptions.HeartbeatTimeout.key -> "0") == 45000L)
  }
}
