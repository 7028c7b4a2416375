package org.apache.spark.shuffle.sluice

import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.shuffle.sluice.rpc.ShuffleMigration
import org.apache.spark.{ShuffleDependency, SparkConf}
import org.apache.spark.shuffle._
import org.apache.spark.shuffle.sort.SortShuffleManager

/**
 * Sluice's manager for Spark's regular (blocking) shuffles:
 * `spark.shuffle.manager=org.apache.spark.shuffle.sluice.SluiceShuffleManager`.
 *
 * Map tasks write blocking result partitions (Flink's "blocking" output type, consumed once
 * complete, which is how Spark's DAG scheduler runs every regular shuffle); reduce tasks read
 * them through an input gate with credit-based remote channels. Settings are validated when the
 * manager is created, so a bad `spark.sluice.*` value, or a Spark setting Sluice cannot honour
 * (a codec, an I/O encryption cipher), stops the application at start with an error naming the
 * key. With Spark's I/O encryption on, partition files are encrypted with the application's key.
 * The executor's network stack starts with the executor (Sluice's plugin starts it), or else with
 * its first shuffle task. Start-up and the shuffles
 * themselves are shared with the pipelined manager ([[SluiceShuffleManagerBase]]).
 *
 * It extends Spark's SortShuffleManager, of which it uses nothing (every method is Sluice's),
 * for one reason: Spark SQL copies every row before a shuffle unless the shuffle manager is a
 * SortShuffleManager (`ShuffleExchangeExec.needToCopyObjectsBeforeShuffle`; SPARK-2967,
 * SPARK-7375; SPARK-51548 asked for a setting and was closed). The copy protects writers that keep
 * records as objects in memory, as the sort shuffle's `ExternalSorter` does. Sluice's writer
 * serialises each record into network memory as it gets it, so the copy is pure cost: a new
 * row, its bytes and a tuple per record (0.8 GiB per 8 million small rows, and GC; see
 * docs/benchmarks.md). Being a SortShuffleManager is the only thing Spark 4.3 checks; its
 * sort-shuffle block resolver is replaced by Sluice's, which refuses the sort shuffle's files.
 */
class SluiceShuffleManager(conf: SparkConf, isDriver: Boolean) extends SortShuffleManager(conf)
  with SluiceShuffleManagerBase {
  import SluiceShuffleManager.MaxDiskSizeKey

  def this(conf: SparkConf) = this(conf, false)

  override protected def pipelined: Boolean = false

  start(conf, isDriver)

  private val migration = ShuffleMigration.enabled(conf)

  override def registerShuffle[K, V, C](shuffleId: Int, dependency: ShuffleDependency[K, V, C]): ShuffleHandle = {
    if (migration) ShuffleMigration.ensureDriverEndpoint()
    super.registerShuffle(shuffleId, dependency)
  }

  override def unregisterShuffle(shuffleId: Int): Boolean = {
    shuffleBlockResolver.forgetShuffle(shuffleId)
    super.unregisterShuffle(shuffleId)
  }

  /**
   * Moves finished map outputs off a decommissioning executor (spark.storage.decommission.*):
   * the receiving executor adopts them and the driver points their MapStatus at it; or, where
   * Spark puts them in its fallback storage, they are copied there and the MapStatus points at it.
   */
  override val shuffleBlockResolver: SluiceShuffleBlockResolver = new SluiceShuffleBlockResolver(
    conf,
    () => SluiceEnvironment.ifStarted,
    () => SluiceEnvironment.get(),
    (id, sluicePort) =>
      ShuffleMigration.relocate(SparkInternals.conf, id,
        SparkInternals.mapOutputLocation(sluicePort)),
    Option(MaxDiskSizeKey).filter(conf.contains).map(conf.getSizeAsBytes),
    () => shuffleTransportConf,
    if (!SluiceFallbackStorage.configured(conf)) None
    else Some(SluiceShuffleBlockResolver.FallbackTarget(() => fallbackStorage,
        id => ShuffleMigration.relocate(SparkInternals.conf, id, SparkInternals.fallbackStorageLocation))))

  private lazy val fallbackStorage: SluiceFallbackStorage = SluiceFallbackStorage(SparkInternals.conf).get

  private lazy val shuffleTransportConf = SparkInternals.shuffleTransportConf(conf)

  override def stop(): Unit = {
    shuffleBlockResolver.stop()
    ShuffleMigration.reset()
    super.stop()
  }
}

private[sluice] object SluiceShuffleManager {
  private val MaxDiskSizeKey = "spark.storage.decommission.shuffleBlocks.maxDiskSize"
}
