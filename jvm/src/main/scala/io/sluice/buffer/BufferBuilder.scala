package io.sluice.buffer

import java.util.concurrent.atomic.AtomicInteger

import io.sluice.memory.NetworkBuffer
import org.apache.spark.unsafe.Platform

/**
 * The writing half of a network buffer (Flink's BufferBuilder): one writer thread appends
 * serialised bytes and publishes them by committing its position; the reading half, a
 * [[BufferConsumer]], may read up to the committed position at any time from another thread.
 * Appending takes no lock: the only shared state is the position marker, written with release
 * semantics on commit and with a full barrier on finish.
 *
 * The builder holds one reference to the buffer and its consumer another; [[close]] drops the
 * builder's when the writer is done with it.
 */
final class BufferBuilder(val buffer: NetworkBuffer) {

  private[buffer] val positionMarker = new AtomicInteger(0)
  private val address = buffer.memoryAddress()
  private val capacity = buffer.capacity()
  private var position = 0
  private var consumerCreated = false
  private var closed = false

  /** The reading half; there is exactly one per builder. */
  def createBufferConsumer(): BufferConsumer = {
    require(!consumerCreated, "a BufferBuilder has only one BufferConsumer")
    consumerCreated = true
    buffer.retain()
    new BufferConsumer(buffer, positionMarker, position)
  }

  /** Copies up to `length` bytes from (base, offset) (a Platform address); returns how many fit. */
  def append(base: AnyRef, offset: Long, length: Int): Int = {
    val n = math.min(length, capacity - position)
    Platform.copyMemory(base, offset, null, address + position, n)
    position += n
    n
  }

  /** Appends the four bytes of `value`, big-endian, if they all fit; returns whether they did. */
  def appendIntIfFits(value: Int): Boolean = {
    if (capacity - position < 4) false
    else {
      Platform.putInt(null, address + position, if (BufferBuilder.LittleEndian) Integer.reverseBytes(value) else value)
      position += 4
      true
    }
  }

  /** Appends one byte; the caller checked [[isFull]]. */
  def appendByte(b: Byte): Unit = {
    Platform.putByte(null, address + position, b)
    position += 1
  }

  /** Publishes everything appended so far to the consumer. */
  def commit(): Unit = positionMarker.lazySet(position)

  /** Commits and marks the buffer finished: no more bytes will come. Returns the bytes written. */
  def finish(): Int = {
    positionMarker.set(BufferBuilder.finishedMarker(position))
    position
  }

  def isFinished: Boolean = positionMarker.get() < 0

  def isFull: Boolean = position == capacity

  def writableBytes: Int = capacity - position

  def writtenBytes: Int = position

  /** Drops the builder's reference; the consumer keeps the buffer alive until it is closed. */
  def close(): Unit = if (!closed) { closed = true; buffer.release() }
}

object BufferBuilder {
  private[buffer] val LittleEndian = java.nio.ByteOrder.nativeOrder() == java.nio.ByteOrder.LITTLE_ENDIAN

  /** Finished positions are stored as -(position + 1), so position 0 can be finished too. */
  private[buffer] def finishedMarker(position: Int): Int = -position - 1

  private[buffer] def positionOf(marker: Int): Int = if (marker < 0) -marker - 1 else marker
}
