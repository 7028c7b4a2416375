package org.apache.spark.shuffle.sluice

import scala.util.control.NonFatal

import io.sluice.ShuffleEnvironment
import io.sluice.metrics.SystemClock
import io.sluice.partition.{BlockingResultPartition, ResultPartitionID}
import io.sluice.writer.{ChannelSelector, LatencyMarkerEmitter, RecordWriter}
import org.apache.spark.TaskContext
import org.apache.spark.internal.Logging
import org.apache.spark.scheduler.MapStatus
import org.apache.spark.shuffle.{ShuffleWriteMetricsReporter, ShuffleWriter}
import org.apache.spark.shuffle.checksum.RowBasedChecksum

/**
 * Writes one map task's output into a blocking result partition, one subpartition per reduce
 * partition: the dependency's map-side combine, then Spark's partitioner as the channel selector,
 * the dependency's serializer, and per-buffer compression when spark.shuffle.compress is on. The
 * partition spills to Spark's local dirs when its network buffers run out, and becomes readable
 * (by local and remote readers, as often as needed) when the task succeeds.
 */
private[sluice] final class SluiceShuffleWriter[K, V](
    handle: SluiceShuffleHandle[K, V, _],
    mapId: Long,
    context: TaskContext,
    metrics: ShuffleWriteMetricsReporter,
    env: ShuffleEnvironment,
    serverPort: => Int) extends ShuffleWriter[K, V] with Logging {

  private val dep = handle.dependency
  private val numPartitions = dep.partitioner.numPartitions
  private var partition: BlockingResultPartition = _
  private var serializer: SparkRecordSerializer = _
  private var lengths: Array[Long] = new Array[Long](numPartitions)
  private var stopping = false
  private var latencyMarkers: LatencyMarkerEmitter = _

  override def write(records: Iterator[Product2[K, V]]): Unit = {
    val start = System.nanoTime()
    partition = env.createBlockingPartition(ResultPartitionID(dep.shuffleId, mapId), numPartitions)
    SluiceTaskMetrics.group(env, context).foreach(_.attachPartition(partition))
    serializer = SparkRecordSerializer(dep.serializer, numPartitions)
    val partitioner = dep.partitioner
    val selector = new ChannelSelector[Product2[Any, Any]] {
      override def numberOfChannels: Int = numPartitions
      override def selectChannel(record: Product2[Any, Any]): Int = partitioner.getPartition(record._1)
    }
    val writer = new RecordWriter[Product2[Any, Any]](partition, selector, serializer, flushAlways = false)
    val markerInterval = SluiceTaskMetrics.latencyInterval(env, context)
    if (markerInterval > 0) {
      try {
        latencyMarkers = new LatencyMarkerEmitter(writer, markerInterval, context.stageId(), context.partitionId(),
          SystemClock, env.outputFlusher)
      } catch {
        case NonFatal(e) => logWarning(s"No latency markers from task ${context.taskAttemptId()}: ${e.getMessage}")
      }
    }
    val markers = latencyMarkers
    val input: Iterator[Product2[Any, Any]] =
      if (dep.mapSideCombine) {
        val agg = dep.aggregator.getOrElse(throw new IllegalStateException("map-side combine without an aggregator"))
        agg.combineValuesByKey(records, context).asInstanceOf[Iterator[Product2[Any, Any]]]
      } else records.asInstanceOf[Iterator[Product2[Any, Any]]]
    val checksums: Array[RowBasedChecksum] = Option(dep.rowBasedChecksums).getOrElse(Array.empty)
    val useChecksums = checksums.length == numPartitions
    var n = 0L
    while (input.hasNext) {
      val r = input.next()
      val p = selector.selectChannel(r)
      writer.emit(r, p)
      if (useChecksums) checksums(p).update(r._1, r._2)
      if (markers != null) markers.onRecord()
      n += 1
    }
    if (markers != null) markers.close()
    metrics.incRecordsWritten(n)
    partition.finish()
    lengths = partition.subpartitionSizes
    env.registerPartition(partition)
    metrics.incBytesWritten(lengths.sum)
    metrics.incWriteTime(System.nanoTime() - start)
  }

  override def stop(success: Boolean): Option[MapStatus] = {
    if (stopping) return None
    stopping = true
    if (latencyMarkers != null) latencyMarkers.close()
    if (serializer != null) serializer.close()
    if (success && partition != null && partition.isFinished) {
      val checksums = Option(dep.rowBasedChecksums).getOrElse(Array.empty)
      val checksum = if (checksums.length == numPartitions) RowBasedChecksum.getAggregatedChecksumValue(checksums) else 0L
      Some(SparkInternals.mapStatus(SparkInternals.mapOutputLocation(serverPort), lengths, mapId, checksum))
    } else {
      if (partition != null) {
        env.partitionManager.releasePartition(partition.partitionId, null)
        partition.release(new IllegalStateException(s"map task ${context.taskAttemptId()} failed"))
        partition.closeBufferBuilders()
      }
      None
    }
  }

  override def getPartitionLengths(): Array[Long] = lengths
}
