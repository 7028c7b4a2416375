package io.sluice.writer

/**
 * Picks the subpartition (consumer channel) a record goes to (Flink's ChannelSelector). Spark's
 * partitioner is one: the Spark layer adapts `Partitioner.getPartition(key)`. Stateless or
 * single-threaded.
 */
trait ChannelSelector[-T] {
  def numberOfChannels: Int
  def selectChannel(record: T): Int
}
