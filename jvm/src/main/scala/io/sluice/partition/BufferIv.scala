package io.sluice.partition

import io.netty.buffer.ByteBuf

/**
 * The initial counter block of one encrypted buffer (AES/CTR's IV), as two big-endian halves.
 * A partition file draws a random IV when it is created; its buffer at file offset `o` counts
 * from that IV plus `o` ([[plus]]). A buffer of `n` bytes uses ceil(n / 16) counter values and
 * the next buffer starts at least `n` offsets later, so no two buffers of a file share a counter
 * value, and files share none unless their random 128-bit IVs fall within a file's length of each
 * other. The IV travels in a BufferResponse's header, never in the payload: a stored buffer keeps
 * the length of its plain text and still fits the reader's network buffer. Immutable.
 */
final case class BufferIv(high: Long, low: Long) {

  /** This IV plus `offset` (>= 0), as one 128-bit unsigned number (CTR's counter wraps the same way). */
  def plus(offset: Long): BufferIv = {
    val l = low + offset
    BufferIv(if (java.lang.Long.compareUnsigned(l, low) < 0) high + 1 else high, l)
  }

  def writeTo(buf: ByteBuf): Unit = { buf.writeLong(high); buf.writeLong(low) }

  /** The 16 bytes of the IV, big-endian, into `out` at 0. */
  def copyTo(out: Array[Byte]): Unit = {
    var i = 0
    while (i < 8) {
      out(i) = (high >>> (56 - 8 * i)).toByte
      out(8 + i) = (low >>> (56 - 8 * i)).toByte
      i += 1
    }
  }

  override def toString: String = f"BufferIv($high%016x$low%016x)"
}

object BufferIv {

  /** Bytes of an IV (AES's block). */
  val Length: Int = 16

  def readFrom(buf: ByteBuf): BufferIv = BufferIv(buf.readLong(), buf.readLong())
}
