package io.sluice.buffer

import java.util.concurrent.atomic.AtomicInteger

import io.netty.buffer.ByteBuf
import io.sluice.memory.NetworkBuffer

/**
 * The reading half of a network buffer (Flink's BufferConsumer). Each [[build]] returns a
 * retained read-only slice of the bytes committed since the previous one, so a buffer flushed
 * while partly filled stays in its subpartition queue and the next read continues from the
 * reader index. One reader thread at a time (the subpartition's lock serialises readers); the
 * writer runs concurrently.
 */
final class BufferConsumer private[buffer] (buffer: NetworkBuffer, marker: AtomicInteger, start: Int) {

  private var readerPosition = start
  private var closed = false

  /** The bytes committed since the last build, as a retained slice (empty when there are none). */
  def build(): ByteBuf = {
    val end = BufferBuilder.positionOf(marker.get())
    val slice = buffer.retainedSlice(readerPosition, end - readerPosition)
    readerPosition = end
    slice
  }

  /** The writer finished the buffer; what is committed is all there will be. */
  def isFinished: Boolean = marker.get() < 0

  /** Committed bytes not yet built. */
  def isDataAvailable: Boolean = readerPosition < BufferBuilder.positionOf(marker.get())

  def writtenBytes: Int = BufferBuilder.positionOf(marker.get())

  def unreadBytes: Int = BufferBuilder.positionOf(marker.get()) - readerPosition

  /** Drops the consumer's reference; slices already built stay valid until released. */
  def close(): Unit = if (!closed) { closed = true; buffer.release() }

  def isClosed: Boolean = closed

  override def toString: String =
    s"BufferConsumer(read=$readerPosition, written=$writtenBytes, finished=$isFinished, closed=$closed)"
}
