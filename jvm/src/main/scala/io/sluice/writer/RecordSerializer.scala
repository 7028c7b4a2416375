package io.sluice.writer

import io.sluice.serialization.DataOutputSerializer
import org.apache.spark.unsafe.Platform

/**
 * Turns a record into bytes for the [[RecordWriter]]. A serialiser either writes the record into
 * the scratch array of `target` or, when the record already is contiguous bytes (Spark's
 * UnsafeRow), points `target` at them so they are copied only once, straight into the network
 * buffer. Single-threaded.
 */
trait RecordSerializer[-T] {

  /** Serialises `record`, bound for `subpartition` (stream formats may keep one stream each). */
  def serialize(record: T, subpartition: Int, target: SerializedRecord): Unit
}

/** The serialised form of the current record: (base, offset, length) as for Platform.copyMemory. */
final class SerializedRecord {
  val scratch = new DataOutputSerializer()
  var base: AnyRef = _
  var offset: Long = 0L
  var length: Int = 0

  /** Points at the scratch array's contents (after writing the record into it). */
  def useScratch(): Unit = {
    base = scratch.array
    offset = Platform.BYTE_ARRAY_OFFSET
    length = scratch.length
  }

  /** Points at bytes that live elsewhere (nothing is copied). */
  def point(b: AnyRef, off: Long, len: Int): Unit = { base = b; offset = off; length = len }
}
