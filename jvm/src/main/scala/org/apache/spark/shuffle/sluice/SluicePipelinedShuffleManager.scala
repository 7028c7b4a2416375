package org.apache.spark.shuffle.sluice

import org.apache.spark.shuffle.sluice.rpc.PipelinedProducerDirectory
import org.apache.spark.{ShuffleDependency, SparkConf}
import org.apache.spark.shuffle._
import org.apache.spark.shuffle.streaming.StreamingShuffleManager

/**
 * Sluice's manager for pipelined shuffles (Structured Streaming's Real-Time Mode):
 * `spark.shuffle.manager.incremental=org.apache.spark.shuffle.sluice.SluicePipelinedShuffleManager`.
 *
 * Producers write pipelined result partitions that consumers read while they are written, over
 * the executor's shared, credit-based connections; the output flusher bounds how long a record
 * waits in a partly filled buffer (spark.sluice.bufferTimeout). Readers learn where the producers
 * run from the [[PipelinedProducerDirectory]]. It extends Spark's StreamingShuffleManager only
 * because Spark 4.3.0 creates the StreamingShuffleOutputTracker its scheduler requires for
 * pipelined shuffles only for that class; every method is Sluice's own ([[SluiceShuffleManagerBase]]).
 */
class SluicePipelinedShuffleManager(conf: SparkConf, isDriver: Boolean) extends StreamingShuffleManager
  with SluiceShuffleManagerBase {

  def this(conf: SparkConf) = this(conf, false)

  override protected def pipelined: Boolean = true

  start(conf, isDriver)

  override def registerShuffle[K, V, C](shuffleId: Int, dependency: ShuffleDependency[K, V, C]): ShuffleHandle = {
    PipelinedProducerDirectory.ensureDriverEndpoint()
    super.registerShuffle(shuffleId, dependency)
  }

  override def stop(): Unit = {
    PipelinedProducerDirectory.reset()
    super.stop()
  }
}
