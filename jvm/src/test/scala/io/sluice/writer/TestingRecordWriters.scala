package io.sluice.writer

import org.apache.spark.unsafe.Platform

/** Serialisers and selectors for byte-array records. */
object TestingRecordWriters {

  /** Points at the record's own bytes: copied once, straight into the network buffer. */
  object PointingSerializer extends RecordSerializer[Array[Byte]] {
    override def serialize(record: Array[Byte], subpartition: Int, target: SerializedRecord): Unit =
      target.point(record, Platform.BYTE_ARRAY_OFFSET, record.length)
  }

  /** Writes the record into the scratch array first, as an object serialiser would. */
  object ScratchSerializer extends RecordSerializer[Array[Byte]] {
    override def serialize(record: Array[Byte], subpartition: Int, target: SerializedRecord): Unit = {
      target.scratch.write(record, 0, record.length)
      target.useScratch()
    }
  }

  /** Sends a record to the channel named by its length (modulo the channels). */
  final class ByLength(val numberOfChannels: Int) extends ChannelSelector[Array[Byte]] {
    override def selectChannel(record: Array[Byte]): Int = record.length % numberOfChannels
  }
}
