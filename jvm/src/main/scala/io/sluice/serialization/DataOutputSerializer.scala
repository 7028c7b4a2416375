package io.sluice.serialization

import java.io.OutputStream

import org.apache.spark.unsafe.Platform

/**
 * A growable on-heap byte array that serialisation streams write into (Flink's
 * DataOutputSerializer): the "flexible on-heap byte array" of "A Deep-Dive into Flink's Network Stack" that a record is serialised
 * into before the partition copies it into network buffers. Reused across records; not
 * thread-safe.
 */
final class DataOutputSerializer(initialSize: Int = 256) extends OutputStream {
  private var buf = new Array[Byte](initialSize)
  private var count = 0

  override def write(b: Int): Unit = {
    ensure(1)
    buf(count) = b.toByte
    count += 1
  }

  override def write(b: Array[Byte], off: Int, len: Int): Unit = {
    ensure(len)
    System.arraycopy(b, off, buf, count, len)
    count += len
  }

  /** Appends `len` bytes from (base, offset) as for Platform.copyMemory. */
  def write(base: AnyRef, offset: Long, len: Int): Unit = {
    ensure(len)
    Platform.copyMemory(base, offset, buf, Platform.BYTE_ARRAY_OFFSET + count, len)
    count += len
  }

  private def ensure(n: Int): Unit = if (count + n > buf.length) {
    val needed = count.toLong + n
    if (needed > Int.MaxValue - 16) throw new IllegalArgumentException(s"A record of $needed bytes is too large")
    buf = java.util.Arrays.copyOf(buf, math.max(needed, math.min(Int.MaxValue - 16L, buf.length * 2L)).toInt)
  }

  def array: Array[Byte] = buf
  def length: Int = count
  def clear(): Unit = count = 0

  /** Drops the first `n` bytes (a consumed prefix), keeping the rest at the start. */
  def discard(n: Int): Unit = {
    System.arraycopy(buf, n, buf, 0, count - n)
    count -= n
  }
}
