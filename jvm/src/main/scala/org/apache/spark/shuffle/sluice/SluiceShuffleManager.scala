package org.apache.spark.shuffle.sluice

import org.apache.spark.SparkConf
import org.apache.spark.shuffle._

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
 * The executor's network stack starts lazily with the first task.
 * Start-up and the shuffles themselves are shared with the pipelined manager
 * ([[SluiceShuffleManagerBase]]).
 */
class SluiceShuffleManager(conf: SparkConf, isDriver: Boolean) extends BlockingShuffleManager
  with SluiceShuffleManagerBase {

  def this(conf: SparkConf) = this(conf, false)

  override protected def pipelined: Boolean = false

  start(conf, isDriver)

  override val shuffleBlockResolver: ShuffleBlockResolver = new SluiceShuffleBlockResolver
}
