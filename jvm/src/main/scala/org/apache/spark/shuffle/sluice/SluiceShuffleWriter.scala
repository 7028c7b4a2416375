package org.apache.spark.shuffle.sluice

import scala.util.control.NonFatal

import io.sluice.ShuffleEnvironment
import io.sluice.config.SluiceOptions
import io.sluice.metrics.SystemClock
import io.sluice.partition.{SortMergeResultPartition, PipelinedResultPartition, ResultPartition, ResultPartitionID}
import io.sluice.writer.{ChannelSelector, LatencyMarkerEmitter, OutputFlusher, RecordWriter}
import org.apache.spark.TaskContext
import org.apache.spark.internal.Logging
import org.apache.spark.scheduler.MapStatus
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.shuffle.sluice.metrics.SluiceTaskMetrics
import org.apache.spark.shuffle.sluice.rpc.PipelinedProducerDirectory
import org.apache.spark.shuffle.{ShuffleWriteMetricsReporter, ShuffleWriter}
import org.apache.spark.shuffle.checksum.RowBasedChecksum

/**
 * Writes one map task's output into a result partition, one subpartition per reduce partition:
 * the dependency's map-side combine, Spark's partitioner as the channel selector, the
 * dependency's serializer, then [[RecordWriter]] into network buffers.
 *
 * Regular shuffles write a blocking partition: it spills to Spark's local dirs when its buffers
 * run out, is compressed per buffer when spark.shuffle.compress is on, and becomes readable (as
 * often as needed) when the task succeeds. Pipelined shuffles (Real-Time Mode) write a pipelined
 * partition that readers consume while it is written, flushed by the output flusher every
 * spark.sluice.bufferTimeout (0: after every record); the task ends once every reader has read
 * the end of its subpartition.
 */
private[sluice] final class SluiceShuffleWriter[K, V](
    handle: SluiceShuffleHandle[K, V, _],
    mapId: Long,
    context: TaskContext,
    metrics: ShuffleWriteMetricsReporter,
    env: ShuffleEnvironment,
    pipelined: Boolean) extends ShuffleWriter[K, V] with Logging {

  private val dep = handle.dependency
  private val numPartitions = dep.partitioner.numPartitions
  private val checksums: Array[RowBasedChecksum] = Option(dep.rowBasedChecksums).getOrElse(Array.empty)
  private var partition: ResultPartition = _
  private var serializer: SparkRecordSerializer = _
  private var lengths: Array[Long] = new Array[Long](numPartitions) // stored bytes (blocking only)
  private var completed = false
  private var stopping = false
  private var latencyMarkers: LatencyMarkerEmitter = _

  override def write(records: Iterator[Product2[K, V]]): Unit = {
    val bufferTimeout = env.conf.get(SluiceOptions.BufferTimeout)
    partition =
      if (pipelined) {
        val p = env.createPipelinedPartition(ResultPartitionID(dep.shuffleId, context.partitionId()), numPartitions)
        env.registerPartition(p)
        PipelinedProducerDirectory.announce(dep.shuffleId, context.partitionId(),
          SparkInternals.mapOutputLocation(env.serverPort))
        p
      } else env.createBlockingPartition(ResultPartitionID(dep.shuffleId, mapId), numPartitions)
    SluiceTaskMetrics.group(env, context).foreach(_.attachPartition(partition))
    val flusher: Option[OutputFlusher.Registration] =
      if (pipelined && bufferTimeout > 0) Some(env.outputFlusher.register(partition, bufferTimeout)) else None
    try {
      serializer = SparkRecordSerializer(dep.serializer, numPartitions)
      val partitioner = dep.partitioner
      val selector = new ChannelSelector[Product2[Any, Any]] {
        override def numberOfChannels: Int = numPartitions
        override def selectChannel(record: Product2[Any, Any]): Int = partitioner.getPartition(record._1)
      }
      val writer = new RecordWriter[Product2[Any, Any]](partition, selector, serializer,
        flushAlways = pipelined && bufferTimeout == 0)
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
    } finally flusher.foreach(_.cancel())
    var waitForReaders = 0L
    val bytesWritten = partition match {
      case b: SortMergeResultPartition =>
        lengths = b.subpartitionSizes
        env.registerPartition(b)
        lengths.sum
      case p: PipelinedResultPartition =>
        // Spark ignores a pipelined MapStatus; the task ends once its readers have everything.
        val start = System.nanoTime()
        p.awaitConsumed(env.conf.get(SluiceOptions.RequestTimeout))
        waitForReaders = System.nanoTime() - start
        p.numBytesOut.sum()
    }
    completed = true
    metrics.incBytesWritten(bytesWritten)
    // Like the sort shuffle's write time: blocked on output (buffers, spill I/O, readers), not
    // the time spent computing and serialising records.
    metrics.incWriteTime(partition.blockedWriteTimeNanos + waitForReaders)
  }

  override def stop(success: Boolean): Option[MapStatus] = {
    if (stopping) return None
    stopping = true
    if (latencyMarkers != null) latencyMarkers.close()
    if (serializer != null) serializer.close()
    if (success && completed) {
      val checksum = if (checksums.length == numPartitions) RowBasedChecksum.getAggregatedChecksumValue(checksums) else 0L
      Some(SparkInternals.mapStatus(SluiceEnvironment.blockingOutputLocation(env), lengths, mapId, checksum))
    } else {
      if (partition != null) {
        val cause = new IllegalStateException(s"map task ${context.taskAttemptId()} of shuffle ${dep.shuffleId} failed")
        env.partitionManager.releasePartition(partition.partitionId, cause)
        partition.release(cause)
        partition.closeBufferBuilders()
      }
      None
    }
  }

  override def getPartitionLengths(): Array[Long] = lengths
}
