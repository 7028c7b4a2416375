package org.apache.spark.shuffle.sluice.bench

import org.apache.spark.{SparkConf, SparkEnv, TaskContext}
import org.apache.spark.scheduler.MapStatus
import org.apache.spark.shuffle._
import org.apache.spark.shuffle.sort.SortShuffleManager

/**
 * A shuffle that moves nothing, the floor contender of `sluice bench scale`
 * (`spark.shuffle.manager=org.apache.spark.shuffle.sluice.bench.DiscardingShuffleManager`): a
 * map task computes and drains its records and reports one byte per partition; a reduce task
 * reads nothing. Its answers are wrong by design; its time is what the same job costs Spark with
 * a shuffle that costs nothing: tasks scheduled, deserialised and run, the map side computed, the
 * reduce side's fixed costs. No shuffle can beat it, so it bounds the ratio any shuffle can reach
 * against the sort shuffle. A SortShuffleManager for the same reason Sluice's manager is one
 * (Spark SQL then skips its copy of each row). Benchmark code, never on a product path.
 */
class DiscardingShuffleManager(conf: SparkConf) extends SortShuffleManager(conf) {

  override def getWriter[K, V](
      handle: ShuffleHandle,
      mapId: Long,
      context: TaskContext,
      metrics: ShuffleWriteMetricsReporter): ShuffleWriter[K, V] = {
    val partitions = handle.asInstanceOf[BaseShuffleHandle[_, _, _]].dependency.partitioner.numPartitions
    new ShuffleWriter[K, V] {
      private val lengths = Array.fill(partitions)(1L)

      override def write(records: Iterator[Product2[K, V]]): Unit =
        while (records.hasNext) records.next()

      override def stop(success: Boolean): Option[MapStatus] =
        if (success) Some(MapStatus(SparkEnv.get.blockManager.shuffleServerId, lengths, mapId, 0L)) else None

      override def getPartitionLengths(): Array[Long] = lengths
    }
  }

  override def getReader[K, C](
      handle: ShuffleHandle,
      startMapIndex: Int,
      endMapIndex: Int,
      startPartition: Int,
      endPartition: Int,
      context: TaskContext,
      metrics: ShuffleReadMetricsReporter): ShuffleReader[K, C] =
    new ShuffleReader[K, C] { override def read(): Iterator[Product2[K, C]] = Iterator.empty }
}
