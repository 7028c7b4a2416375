package io.sluice.memory

import java.nio.{ByteBuffer, ByteOrder}

import io.netty.util.internal.PlatformDependent

/**
 * A fixed-size chunk of off-heap (direct) memory: the unit the network buffer pools hand out.
 * Flink's MemorySegment. A segment has one owner at a time (a pool, a buffer, a reader); it is
 * not thread-safe and needs no locking because ownership is handed over through the pools.
 */
final class MemorySegment private (val byteBuffer: ByteBuffer, val address: Long) {

  def size: Int = byteBuffer.capacity()

  override def toString: String = s"MemorySegment(${size}b @ 0x${address.toHexString})"
}

object MemorySegment {

  /** Allocates a direct segment of `size` bytes (counted against -XX:MaxDirectMemorySize). */
  def allocateOffHeap(size: Int): MemorySegment = {
    val bb = ByteBuffer.allocateDirect(size).order(ByteOrder.BIG_ENDIAN)
    new MemorySegment(bb, PlatformDependent.directBufferAddress(bb))
  }
}
