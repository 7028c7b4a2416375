package io.sluice.memory

import io.netty.buffer.{UnpooledByteBufAllocator, UnpooledUnsafeDirectByteBuf}

/**
 * A reference-counted network buffer over one [[MemorySegment]] (Flink's NetworkBuffer). It is a
 * Netty ByteBuf, so Netty can write it to a socket without copying; when the last reference
 * (including retained slices handed to readers) is released, the segment goes back to its
 * recycler instead of being freed. Reference counting is thread-safe; the contents are not.
 */
final class NetworkBuffer(val segment: MemorySegment, recycler: BufferRecycler)
  extends UnpooledUnsafeDirectByteBuf(UnpooledByteBufAllocator.DEFAULT, segment.byteBuffer.duplicate(), segment.size) {

  clear()

  override protected def deallocate(): Unit = recycler.recycle(segment)

  override def toString: String = s"NetworkBuffer(refCnt=${refCnt()}, r=$readerIndex, w=$writerIndex, $segment)"
}
