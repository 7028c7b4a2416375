package org.apache.spark.shuffle.sluice

import io.sluice.NettyLeakDetection
import io.sluice.config.{SluiceConf, SluiceOptions}
import io.sluice.netty.PartitionRequestClientFactory
import org.apache.spark.shuffle.sluice.internal.TransportConfOverlay
import org.apache.spark.network.util.{MapConfigProvider, TransportConf}
import org.apache.spark.SparkConf
import org.scalatest.funsuite.AnyFunSuite

/** How the executor's engine settings follow Spark's own. */
class SluiceEnvironmentSuite extends AnyFunSuite with NettyLeakDetection {

  private def heartbeat(settings: (String, String)*): Long =
    SluiceEnvironment.engineConf(new SparkConf(false).setAll(settings)).get(SluiceOptions.HeartbeatTimeout)

  test("pipelined buffers carry a CRC32C as Spark's spark.shuffle.streaming.checksum.enabled says, on by default") {
    assert(SluiceEnvironment.checksumsInTransit(new SparkConf()))
    assert(!SluiceEnvironment.checksumsInTransit(new SparkConf().set("spark.shuffle.streaming.checksum.enabled", "false")))
    assert(SluiceEnvironment.StreamingChecksumKey == "spark.shuffle.streaming.checksum.enabled")
  }

  test("task slots: a local master's threads, else spark.executor.cores, else the master's or Spark's default, per task's cpus") {
    def slots(settings: (String, String)*): Int = SluiceEnvironment.taskSlots(new SparkConf(false).setAll(settings))._1
    val machine = Runtime.getRuntime.availableProcessors()
    assert(slots("spark.master" -> "local") == 1)
    assert(slots("spark.master" -> "local[3]") == 3)
    assert(slots("spark.master" -> "local[4, 2]", "spark.executor.cores" -> "8") == 4, "a local master ignores executor cores")
    assert(slots("spark.master" -> "local[*]") == machine)
    assert(slots("spark.master" -> "local-cluster[2,3,1024]") == 3)
    assert(slots("spark.master" -> "local-cluster[2,3,1024]", "spark.executor.cores" -> "2") == 2)
    assert(slots("spark.master" -> "yarn") == 1, "Spark's default on YARN")
    assert(slots("spark.master" -> "k8s://https://k:443", "spark.executor.cores" -> "8", "spark.task.cpus" -> "2") == 4)
    assert(slots("spark.master" -> "spark://h:7077") == machine, "a standalone executor takes its worker's cores")
    assert(slots("spark.master" -> "local[2]", "spark.task.cpus" -> "4") == 1, "at least one")
  }

  test("an executor refuses network memory its task slots cannot make progress in, naming where the slots came from") {
    def check(master: String): Unit = {
      val conf = new SparkConf(false).setAll(Seq("spark.master" -> master, SluiceOptions.SegmentSize.key -> "4k",
          SluiceOptions.NetworkMemory.key -> "64k"))
      SluiceEnvironment.checkNetworkMemory(conf, SluiceEnvironment.engineConf(conf))
    }
    // 16 segments, 2 of them the server's: 6 slots reading remote outputs need 6 x 2 + 2 + 2.
    val msg = intercept[IllegalArgumentException](check("local-cluster[2,6,1024]")).getMessage
    assert(msg.contains("6 task slots (spark.master=local-cluster[2,6,1024] / spark.task.cpus=1) 14 network buffers") &&
        msg.contains("at least 72k"), msg)
    check("local-cluster[2,4,1024]")
    check("local[6]") // a local master's gates read no remote channel: 6 x 1 + 2
  }

  test("the heartbeat timeout follows spark.network.timeout unless Sluice's own option is set") {
    assert(heartbeat() == 120000L, "Spark's default spark.network.timeout")
    assert(heartbeat("spark.network.timeout" -> "30s") == 30000L)
    assert(heartbeat("spark.network.timeout" -> "30s", SluiceOptions.HeartbeatTimeout.key -> "5s") == 5000L)
    assert(heartbeat("spark.network.timeout" -> "45s", SluiceOptions.HeartbeatTimeout.key -> "0") == 45000L)
  }

  test("the connect timeout follows spark.network.timeout unless Sluice's own option is set") {
    def connect(settings: (String, String)*): (Long, String) = {
      val engine = SluiceEnvironment.engineConf(new SparkConf(false).setAll(settings))
      val transport = TransportConfOverlay(
        new TransportConf("sluice", new MapConfigProvider(java.util.Collections.emptyMap())), engine)
      (engine.get(SluiceOptions.ConnectTimeout), transport.get("spark.sluice.io.connectionCreationTimeout", null))
    }
    assert(connect() == (120000L, "120s"), "Spark's default spark.network.timeout")
    assert(connect("spark.network.timeout" -> "15s") == (15000L, "15s"))
    // An explicit setting wins, whichever is shorter; 0 is the default spelled out.
    assert(connect("spark.network.timeout" -> "15s", SluiceOptions.ConnectTimeout.key -> "10s") == (10000L, "10s"))
    assert(connect("spark.network.timeout" -> "15s", SluiceOptions.ConnectTimeout.key -> "40s") == (40000L, "40s"))
    assert(connect("spark.network.timeout" -> "45s", SluiceOptions.ConnectTimeout.key -> "0") == (45000L, "45s"))
    // Each follows on its own: a heartbeat timeout of its own leaves the connect timeout following.
    val both = SluiceEnvironment.engineConf(new SparkConf(false).setAll(Seq("spark.network.timeout" -> "20s",
          SluiceOptions.HeartbeatTimeout.key -> "6s")))
    assert(both.get(SluiceOptions.HeartbeatTimeout) == 6000L && both.get(SluiceOptions.ConnectTimeout) == 20000L)
    // Without the Spark layer (the engine alone, as in its own tests), 0 means Spark's default.
    assert(PartitionRequestClientFactory.connectTimeoutMs(SluiceConf(Nil)) == 120000L)
    assert(PartitionRequestClientFactory.connectTimeoutMs(SluiceConf(Seq(SluiceOptions.ConnectTimeout.key -> "3s"))) == 3000L)
  }

  test("spark.io.encryption.enabled: partition files get Spark's I/O key and AES/CTR; other ciphers are refused at start") {
    def conf(settings: (String, String)*) = new SparkConf(false).setAll(settings)
    val key = Array.fill[Byte](32)(3)
    assert(SluiceEnvironment.fileCipher(conf(), throw new AssertionError("no key is asked for when encryption is off")).isEmpty)
    assert(SluiceEnvironment.fileCipher(conf("spark.io.crypto.cipher.transformation" -> "AES/CBC/PKCS5Padding"), None).isEmpty,
      "the cipher setting is not used, so not refused, while encryption is off")
    val on = conf("spark.io.encryption.enabled" -> "true")
    assert(SluiceEnvironment.fileCipher(on, Some(key)).map(_.keySizeBits).contains(256))
    val missing = intercept[IllegalStateException](SluiceEnvironment.fileCipher(on, None))
    assert(missing.getMessage.contains("no I/O encryption key"), missing.getMessage)

    val cbc = conf("spark.io.encryption.enabled" -> "true", "spark.io.crypto.cipher.transformation" -> "AES/CBC/PKCS5Padding")
    for (refuse <- Seq[() => Any](() => new SluiceShuffleManager(cbc, true), () => new SluicePipelinedShuffleManager(cbc, true),
        () => SluiceEnvironment.fileCipher(cbc, Some(key)))) {
      val e = intercept[IllegalArgumentException](refuse())
      assert(e.getMessage.contains("spark.io.crypto.cipher.transformation=AES/CBC/PKCS5Padding is not supported"), e.getMessage)
    }
    new SluiceShuffleManager(conf("spark.io.encryption.enabled" -> "true"), true) // the default cipher starts
  }
}
