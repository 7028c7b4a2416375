package org.apache.spark.shuffle.sluice

import org.apache.spark.{ShuffleDependency, SparkConf, TaskContext}
import org.apache.spark.internal.Logging
import org.apache.spark.shuffle._

/**
 * Sluice's manager for Spark's regular (blocking) shuffles:
 * `spark.shuffle.manager=org.apache.spark.shuffle.sluice.SluiceShuffleManager`.
 *
 * Map tasks write blocking result partitions (Flink's "blocking" output type, consumed once
 * complete, which is how Spark's DAG scheduler runs every regular shuffle); reduce tasks read
 * them through an input gate with credit-based remote channels. Settings are validated when the
 * manager is created, so a bad `spark.sluice.*` value, or a Spark feature Sluice cannot serve
 * ([[SparkFeatureCheck]]: the external shuffle service, push-based shuffle, ...), stops the
 * application at start with an error naming the key. The executor's network stack starts lazily with the first task.
 */
class SluiceShuffleManager(conf: SparkConf, isDriver: Boolean) extends BlockingShuffleManager with Logging {

  def this(conf: SparkConf) = this(conf, false)

  SparkVersionCheck.verify()
  SparkFeatureCheck.verify(conf)
  SluiceEnvironment.sluiceConf(conf)
  SluiceEnvironment.codec(conf)
  logInfo(s"Using Sluice for regular shuffles (driver=$isDriver)")

  override def registerShuffle[K, V, C](shuffleId: Int, dependency: ShuffleDependency[K, V, C]): ShuffleHandle =
    new SluiceShuffleHandle(shuffleId, dependency, dependency.rdd.partitions.length)

  override def getWriter[K, V](handle: ShuffleHandle, mapId: Long, context: TaskContext,
      metrics: ShuffleWriteMetricsReporter): ShuffleWriter[K, V] = {
    new SluiceShuffleWriter[K, V](SluiceShuffleManager.sluiceHandle(handle), mapId, context, metrics,
      SluiceEnvironment.get(), pipelined = false)
  }

  override def getReader[K, C](handle: ShuffleHandle, startMapIndex: Int, endMapIndex: Int, startPartition: Int,
      endPartition: Int, context: TaskContext, metrics: ShuffleReadMetricsReporter): ShuffleReader[K, C] =
    new SluiceShuffleReader[K, C](SluiceShuffleManager.sluiceHandle(handle), startMapIndex, endMapIndex,
      startPartition, endPartition, context, metrics, SluiceEnvironment.get(), pipelined = false)

  override def unregisterShuffle(shuffleId: Int): Boolean = {
    SluiceEnvironment.ifStarted.foreach(_.releaseShuffle(shuffleId))
    true
  }

  override val shuffleBlockResolver: ShuffleBlockResolver = new SluiceShuffleBlockResolver

  override def stop(): Unit = SluiceEnvironment.stop()
}

private[sluice] object SluiceShuffleManager {
  def sluiceHandle[K, V, C](handle: ShuffleHandle): SluiceShuffleHandle[K, V, C] = handle match {
    case h: SluiceShuffleHandle[K @unchecked, V @unchecked, C @unchecked] => h
    case other => throw new IllegalArgumentException(s"Sluice cannot serve shuffle ${other.shuffleId}: its handle " +
      s"${other.getClass.getName} was made by another shuffle manager")
  }
}
