package org.apache.spark.shuffle.sluice.internal

import io.sluice.config.SparkSettingRules

import org.apache.spark.SparkConf
import org.apache.spark.shuffle.sluice.SluiceShuffleManager
import org.scalatest.funsuite.AnyFunSuite

class SparkFeatureCheckSuite extends AnyFunSuite {

  private def conf(settings: (String, String)*): SparkConf =
    new SparkConf(false).setMaster("spark://10.0.0.1:7077").setAll(settings)

  private def refusal(settings: (String, String)*): String =
    intercept[IllegalArgumentException](SparkFeatureCheck.verify(conf(settings: _*))).getMessage

  test("Spark's defaults, and the settings Sluice documents, are accepted") {
    SparkFeatureCheck.verify(conf())
    SparkFeatureCheck.verify(conf("spark.shuffle.service.enabled" -> "false", "spark.shuffle.push.enabled" -> "false"))
    // Shuffle tracking is on by default in Spark 4.3: dynamic allocation alone is fine.
    SparkFeatureCheck.verify(conf("spark.dynamicAllocation.enabled" -> "true"))
    SparkFeatureCheck.verify(conf("spark.dynamicAllocation.enabled" -> "true",
        "spark.dynamicAllocation.shuffleTracking.enabled" -> "true"))
    // Decommissioning, with or without shuffle-block migration (Sluice's resolver migrates).
    SparkFeatureCheck.verify(conf("spark.decommission.enabled" -> "true"))
    SparkFeatureCheck.verify(conf("spark.decommission.enabled" -> "true", "spark.storage.decommission.enabled" -> "true"))
    SparkFeatureCheck.verify(conf("spark.decommission.enabled" -> "true", "spark.storage.decommission.enabled" -> "true",
        "spark.storage.decommission.shuffleBlocks.enabled" -> "false"))
  }

  test("the external shuffle service is refused, naming the key and what to use instead") {
    val m = refusal("spark.shuffle.service.enabled" -> "true")
    assert(m.contains("spark.shuffle.service.enabled=true"), m)
    assert(m.contains("Set spark.shuffle.service.enabled=false"), m)
    assert(m.contains("spark.dynamicAllocation.shuffleTracking.enabled=true instead"), m)
    // On YARN the setting usually comes from spark-defaults.conf, for the NodeManagers' auxiliary service.
    assert(m.contains("On YARN"), m)
    assert(m.contains("NodeManagers' spark_shuffle auxiliary service"), m)
    assert(m.contains("--conf spark.shuffle.service.enabled=false --conf " +
        "spark.dynamicAllocation.shuffleTracking.enabled=true"), m)
    assert(m.contains("remove spark.shuffle.manager"), m)
  }

  test("push-based shuffle is refused") {
    val m = refusal("spark.shuffle.push.enabled" -> "true")
    assert(m.contains("spark.shuffle.push.enabled=true"), m)
    assert(m.contains("Set spark.shuffle.push.enabled=false"), m)
    assert(!m.contains("spark.shuffle.service.enabled"), m)
  }

  test("dynamic allocation without shuffle tracking is refused, except where Spark ignores it (local mode)") {
    val m = refusal("spark.dynamicAllocation.enabled" -> "true", "spark.dynamicAllocation.shuffleTracking.enabled" -> "false")
    assert(m.contains("spark.dynamicAllocation.enabled=true with spark.dynamicAllocation.shuffleTracking.enabled=false"), m)
    assert(m.contains("Set spark.dynamicAllocation.shuffleTracking.enabled=true"), m)
    SparkFeatureCheck.verify(conf("spark.dynamicAllocation.enabled" -> "true",
        "spark.dynamicAllocation.shuffleTracking.enabled" -> "false").setMaster("local[2]"))
    // Shuffle tracking off on its own means nothing.
    SparkFeatureCheck.verify(conf("spark.dynamicAllocation.shuffleTracking.enabled" -> "false"))
  }

  test("with Sluice's node shuffle service, dynamic allocation runs without shuffle tracking, through Sluice's storage plugin") {
    val service = Seq("spark.sluice.service.enabled" -> "true",
      io.sluice.config.SparkSettingRules.ShuffleDataIOKey -> io.sluice.config.SparkSettingRules.SluiceShuffleDataIO)
    SparkFeatureCheck.verify(conf(service ++ Seq("spark.dynamicAllocation.enabled" -> "true",
          "spark.dynamicAllocation.shuffleTracking.enabled" -> "false"): _*))
    // Without Sluice's storage plugin Spark would not know the outputs are kept: refused, naming the key.
    val m = refusal("spark.sluice.service.enabled" -> "true")
    assert(m.contains(
        s"${io.sluice.config.SparkSettingRules.ShuffleDataIOKey}=${io.sluice.config.SparkSettingRules.SluiceShuffleDataIO}"), m)
    // Dynamic allocation without tracking or service: the refusal names the service as a way out.
    val d = refusal("spark.dynamicAllocation.enabled" -> "true", "spark.dynamicAllocation.shuffleTracking.enabled" -> "false")
    assert(d.contains("spark.sluice.service.enabled=true"), d)
  }

  test("shuffle tracking left on beside the node shuffle service is a warning, not a refusal") {
    val service = Seq("spark.sluice.service.enabled" -> "true", "spark.dynamicAllocation.enabled" -> "true",
      SparkSettingRules.ShuffleDataIOKey -> SparkSettingRules.SluiceShuffleDataIO)
    val tracking = "spark.dynamicAllocation.shuffleTracking.enabled"
    for (kept <- Seq(conf(service: _*), conf(service :+ (tracking -> "true"): _*))) {
      SparkFeatureCheck.verify(kept)
      val w = SparkFeatureCheck.warnings(kept)
      assert(w.size == 1 && w.head.contains("Spark still keeps every executor that holds map outputs") &&
          w.head.contains(s"Set $tracking=false"), w)
    }
    assert(SparkFeatureCheck.warnings(conf(service :+ (tracking -> "false"): _*)) == Nil)
    assert(SparkFeatureCheck.warnings(conf(service: _*).setMaster("local[2]")) == Nil) // no dynamic allocation there
    assert(SparkFeatureCheck.warnings(conf(service.filterNot(_._1 == "spark.sluice.service.enabled"): _*)) == Nil)
  }

  test("every problem is listed in one message") {
    val m = refusal("spark.shuffle.service.enabled" -> "true", "spark.shuffle.push.enabled" -> "true",
      "spark.dynamicAllocation.enabled" -> "true", "spark.dynamicAllocation.shuffleTracking.enabled" -> "false",
      "spark.decommission.enabled" -> "true", "spark.storage.decommission.enabled" -> "true")
    assert(m.split("\n  - ").length == 4, m)
  }

  test("the codec, the I/O encryption cipher and a fallback storage without Sluice's plugin are refused together") {
    val m = refusal("spark.io.compression.codec" -> "brotli", "spark.io.encryption.enabled" -> "true",
      "spark.io.crypto.cipher.transformation" -> "AES/GCM/NoPadding", "spark.storage.decommission.enabled" -> "true",
      "spark.storage.decommission.fallbackStorage.path" -> "s3a://bucket/fallback/")
    assert(m.split("\n  - ").length == 4, m)
    assert(m.contains("spark.io.compression.codec=brotli: use lz4, lzf, snappy or zstd"), m)
    assert(m.contains("spark.io.crypto.cipher.transformation=AES/GCM/NoPadding is not supported"), m)
    assert(m.contains("spark.storage.decommission.fallbackStorage.path is set"), m)
    assert(m.contains("spark.shuffle.sort.io.plugin.class is not Sluice's storage plugin"), m)
    assert(m.contains(s"Set ${SparkSettingRules.ShuffleDataIOKey}=${SparkSettingRules.SluiceShuffleDataIO}"), m)
  }

  test("a fallback storage with Sluice's storage plugin is served, not refused") {
    SparkFeatureCheck.verify(conf("spark.storage.decommission.enabled" -> "true",
        "spark.storage.decommission.fallbackStorage.path" -> "s3a://bucket/fallback/",
        SparkSettingRules.ShuffleDataIOKey -> SparkSettingRules.SluiceShuffleDataIO))
  }

  test("the blocking manager refuses at construction, on the driver and on executors") {
    for (isDriver <- Seq(true, false)) {
      val e = intercept[IllegalArgumentException](
        new SluiceShuffleManager(conf("spark.shuffle.service.enabled" -> "true"), isDriver))
      assert(e.getMessage.contains("spark.shuffle.service.enabled=true"), e.getMessage)
    }
    new SluiceShuffleManager(conf(), true).stop()
  }
}
