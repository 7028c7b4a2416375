package org.apache.spark.shuffle.sluice

import org.apache.spark.{ShuffleDependency, SparkConf, TaskContext}
import org.apache.spark.internal.Logging
import org.apache.spark.shuffle._
import org.apache.spark.shuffle.streaming.StreamingShuffleManager

/**
 * Sluice's manager for pipelined shuffles (Structured Streaming's Real-Time Mode):
 * `spark.shuffle.manager.incremental=org.apache.spark.shuffle.sluice.SluicePipelinedShuffleManager`.
 *
 * Producers write pipelined result partitions that consumers read while they are written, over
 * the executor's shared, credit-based connections; the output flusher bounds how long a record
 * waits in a partly filled buffer (spark.sluice.bufferTimeout). It extends Spark's
 * StreamingShuffleManager only because Spark 4.3.0 creates the StreamingShuffleOutputTracker its
 * scheduler requires for pipelined shuffles only for that class; every method is Sluice's own.
 */
class SluicePipelinedShuffleManager(conf: SparkConf, isDriver: Boolean) extends StreamingShuffleManager with Logging {

  def this(conf: SparkConf) = this(conf, false)

  SparkVersionCheck.verify()
  SluiceEnvironment.sluiceConf(conf)
  SluiceEnvironment.checkIoEncryption(conf) // the executor's environment (shared with blocking shuffles) needs it
  logInfo(s"Using Sluice for pipelined shuffles (driver=$isDriver)")

  override def registerShuffle[K, V, C](shuffleId: Int, dependency: ShuffleDependency[K, V, C]): ShuffleHandle = {
    PipelinedProducerDirectory.ensureDriverEndpoint(SparkInternals.rpcEnv)
    new SluiceShuffleHandle(shuffleId, dependency, dependency.rdd.partitions.length)
  }

  override def getWriter[K, V](handle: ShuffleHandle, mapId: Long, context: TaskContext,
      metrics: ShuffleWriteMetricsReporter): ShuffleWriter[K, V] =
    new SluiceShuffleWriter[K, V](SluiceShuffleManager.sluiceHandle(handle), mapId, context, metrics,
      SluiceEnvironment.get(), pipelined = true)

  override def getReader[K, C](handle: ShuffleHandle, startMapIndex: Int, endMapIndex: Int, startPartition: Int,
      endPartition: Int, context: TaskContext, metrics: ShuffleReadMetricsReporter): ShuffleReader[K, C] =
    new SluiceShuffleReader[K, C](SluiceShuffleManager.sluiceHandle(handle), startMapIndex, endMapIndex,
      startPartition, endPartition, context, metrics, SluiceEnvironment.get(), pipelined = true)

  /** Pipelined partitions release themselves once consumed; anything left of the shuffle goes. */
  override def unregisterShuffle(shuffleId: Int): Boolean = {
    SluiceEnvironment.ifStarted.foreach(_.releaseShuffle(shuffleId))
    true
  }

  override def stop(): Unit = {
    PipelinedProducerDirectory.reset()
    SluiceEnvironment.stop()
  }
}
