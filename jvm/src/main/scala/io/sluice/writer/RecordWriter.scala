package io.sluice.writer

import io.sluice.partition.ResultPartition

/**
 * Serialises records once and writes them into the subpartition a [[ChannelSelector]] picks
 * (Flink's RecordWriter / ChannelSelectorRecordWriter). With a buffer timeout of 0 it flushes
 * after every record; otherwise flushing is left to full buffers and the [[OutputFlusher]].
 * Belongs to the producer's task thread.
 */
final class RecordWriter[T](
    val partition: ResultPartition,
    selector: ChannelSelector[T],
    serializer: RecordSerializer[T],
    flushAlways: Boolean) {

  require(selector.numberOfChannels == partition.numSubpartitions,
    s"${selector.numberOfChannels} channels for ${partition.numSubpartitions} subpartitions")

  private val record = new SerializedRecord

  def emit(value: T): Unit = emit(value, selector.selectChannel(value))

  /** Writes `value` to a known subpartition (a caller that already applied the partitioner). */
  def emit(value: T, subpartition: Int): Unit = {
    record.scratch.clear()
    serializer.serialize(value, subpartition, record)
    partition.emitRecord(subpartition, record.base, record.offset, record.length)
    if (flushAlways) partition.flush(subpartition)
  }

  /** Sends a latency marker down every channel behind the records already written. */
  def broadcastLatencyMarker(createdAtMillis: Long, producerStage: Int, producerIndex: Int): Unit = {
    partition.broadcastLatencyMarker(createdAtMillis, producerStage, producerIndex)
    if (flushAlways) partition.flushAll()
  }

  def flushAll(): Unit = partition.flushAll()
}
