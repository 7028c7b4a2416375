package org.apache.spark.shuffle.sluice.rpc

import org.apache.spark.SparkConf
import org.apache.spark.shuffle.sluice.SluiceShuffleManager
import org.scalatest.funsuite.AnyFunSuite

/** When executors move Sluice's map outputs on decommissioning, and the setting Sluice refuses. */
class ShuffleMigrationSuite extends AnyFunSuite {

  private def conf(settings: (String, String)*): SparkConf = new SparkConf(false).setAll(settings)

  private val storageDecommission = "spark.storage.decommission.enabled" -> "true"
  private val fallback = "spark.storage.decommission.fallbackStorage.path" -> "file:///tmp/fallback/"

  test("shuffle blocks move when storage decommissioning is on, unless shuffle blocks are switched off") {
    assert(!ShuffleMigration.enabled(conf()), "Spark's default: no storage decommissioning")
    assert(ShuffleMigration.enabled(conf(storageDecommission)), "shuffle blocks default to on")
    assert(!ShuffleMigration.enabled(conf(storageDecommission, "spark.storage.decommission.shuffleBlocks.enabled" -> "false")))
  }

  test("a fallback storage path is refused at start-up, naming the keys and what to do, while shuffle blocks move") {
    val e = intercept[IllegalArgumentException](new SluiceShuffleManager(conf(storageDecommission, fallback), true))
    Seq("spark.storage.decommission.fallbackStorage.path", "spark.storage.decommission.shuffleBlocks.enabled=false",
      "Unset").foreach(s => assert(e.getMessage.contains(s), e.getMessage))
    // Without shuffle migration the fallback storage never sees a Sluice map output.
    new SluiceShuffleManager(conf(storageDecommission, fallback, "spark.storage.decommission.shuffleBlocks.enabled" -> "false"),
      true)
    new SluiceShuffleManager(conf(fallback), true)
    new SluiceShuffleManager(conf(storageDecommission), true)
  }
}
