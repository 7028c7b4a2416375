package org.apache.spark.shuffle.sluice.rpc

import org.apache.spark.SparkConf
import org.apache.spark.shuffle.sluice.{SluiceFallbackStorage, SluiceShuffleManager}
import org.scalatest.funsuite.AnyFunSuite

/** When executors move Sluice's map outputs on decommissioning, and when they may put them in the fallback storage. */
class ShuffleMigrationSuite extends AnyFunSuite {

  private def conf(settings: (String, String)*): SparkConf = new SparkConf(false).setAll(settings)

  private val storageDecommission = "spark.storage.decommission.enabled" -> "true"
  private val fallback = "spark.storage.decommission.fallbackStorage.path" -> "file:///tmp/fallback/"

  test("shuffle blocks move when storage decommissioning is on, unless shuffle blocks are switched off") {
    assert(!ShuffleMigration.enabled(conf()), "Spark's default: no storage decommissioning")
    assert(ShuffleMigration.enabled(conf(storageDecommission)), "shuffle blocks default to on")
    assert(!ShuffleMigration.enabled(conf(storageDecommission, "spark.storage.decommission.shuffleBlocks.enabled" -> "false")))
  }

  test("with a fallback storage path Sluice's map outputs may go there, through Sluice's storage plugin") {
    val plugin = "spark.shuffle.sort.io.plugin.class" -> "org.apache.spark.shuffle.sluice.SluiceShuffleDataIO"
    assert(SluiceFallbackStorage.configured(conf(storageDecommission, fallback)))
    new SluiceShuffleManager(conf(storageDecommission, fallback, plugin), true)
    // Without Sluice's storage plugin nobody would delete the copies: refused, naming the key.
    val e = intercept[IllegalArgumentException](new SluiceShuffleManager(conf(storageDecommission, fallback), true))
    Seq("spark.storage.decommission.fallbackStorage.path", s"${plugin._1}=${plugin._2}").foreach(s =>
      assert(e.getMessage.contains(s), e.getMessage))
    // Without shuffle migration the fallback storage never sees a Sluice map output: nothing is asked.
    val noMigration = conf(storageDecommission, fallback, "spark.storage.decommission.shuffleBlocks.enabled" -> "false")
    assert(!SluiceFallbackStorage.configured(noMigration))
    new SluiceShuffleManager(noMigration, true)
    new SluiceShuffleManager(conf(fallback), true)
    assert(!SluiceFallbackStorage.configured(conf(storageDecommission, fallback._1 -> " ")))
  }
}
