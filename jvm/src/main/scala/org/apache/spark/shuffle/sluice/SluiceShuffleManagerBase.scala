package org.apache.spark.shuffle.sluice

import org.apache.spark.shuffle.sluice.internal.{SparkFeatureCheck, SparkInternals}
import org.apache.spark.{ShuffleDependency, SparkConf, TaskContext}
import org.apache.spark.internal.Logging
import org.apache.spark.shuffle._

/**
 * What Sluice's two shuffle managers share: their start-up checks, and shuffles served by the
 * executor's one [[SluiceEnvironment]]. A subclass says whether its shuffles are pipelined and
 * calls [[start]] from its constructor. Thread-safe.
 */
private[sluice] trait SluiceShuffleManagerBase extends ShuffleManager with Logging {

  /** Whether this manager's result partitions are pipelined (read while written) or blocking. */
  protected def pipelined: Boolean

  /**
   * Start-up, on the driver and on every executor: Spark's internals are what the adapter expects
   * ([[SparkInternals.verify]], which also checks the Spark version; an executor on the builds the
   * driver checked skips it), and the `spark.sluice.*`
   * settings are valid, no Spark setting Sluice cannot honour is on ([[SparkFeatureCheck]]: cluster
   * features, codec, I/O encryption cipher), so a bad value stops the application at
   * start with an error naming the key. The executor's network stack starts with the executor when
   * Sluice's plugin runs ([[SluiceExecutorPlugin]]), else with its first shuffle task.
   */
  protected def start(conf: SparkConf, isDriver: Boolean): Unit = {
    SparkInternals.verify(conf, isDriver)
    SparkFeatureCheck.verify(conf)
    SluiceEnvironment.sluiceConf(conf)
    SluiceEnvironment.codec(conf)
    logInfo(s"Using Sluice for ${if (pipelined) "pipelined" else "regular"} shuffles (driver=$isDriver)")
  }

  override def registerShuffle[K, V, C](shuffleId: Int, dependency: ShuffleDependency[K, V, C]): ShuffleHandle =
    new SluiceShuffleHandle(shuffleId, dependency, dependency.rdd.partitions.length)

  override def getWriter[K, V](handle: ShuffleHandle, mapId: Long, context: TaskContext,
      metrics: ShuffleWriteMetricsReporter): ShuffleWriter[K, V] =
    new SluiceShuffleWriter[K, V](SluiceShuffleManagerBase.sluiceHandle(handle), mapId, context, metrics,
      SluiceEnvironment.get(), pipelined)

  override def getReader[K, C](handle: ShuffleHandle, startMapIndex: Int, endMapIndex: Int, startPartition: Int,
      endPartition: Int, context: TaskContext, metrics: ShuffleReadMetricsReporter): ShuffleReader[K, C] =
    new SluiceShuffleReader[K, C](SluiceShuffleManagerBase.sluiceHandle(handle), startMapIndex, endMapIndex,
      startPartition, endPartition, context, metrics, SluiceEnvironment.get(), pipelined)

  /** Whatever is left of the shuffle's partitions in this executor goes (pipelined ones release themselves). */
  override def unregisterShuffle(shuffleId: Int): Boolean = {
    SluiceEnvironment.ifStarted.foreach(_.releaseShuffle(shuffleId))
    true
  }

  override def stop(): Unit = SluiceEnvironment.stop()
}

private[sluice] object SluiceShuffleManagerBase {
  def sluiceHandle[K, V, C](handle: ShuffleHandle): SluiceShuffleHandle[K, V, C] = handle match {
    case h: SluiceShuffleHandle[K @unchecked, V @unchecked, C @unchecked] => h
    case other => throw new IllegalArgumentException(s"Sluice cannot serve shuffle ${other.shuffleId}: its handle " +
        s"${other.getClass.getName} was made by another shuffle manager")
  }
}
