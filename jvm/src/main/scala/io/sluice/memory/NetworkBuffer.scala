package io.sluice.memory

import io.netty.buffer.{UnpooledByteBufAllocator, UnpooledUnsafeDirectByteBuf}
import io.netty.util.{ResourceLeakDetector, ResourceLeakDetectorFactory, ResourceLeakTracker}

/**
 * A reference-counted network buffer over one [[MemorySegment]] (Flink's NetworkBuffer). It is a
 * Netty ByteBuf, so Netty can write it to a socket without copying; when the last reference
 * (including retained slices handed to readers) is released, the segment goes back to its
 * recycler instead of being freed. Reference counting is thread-safe; the contents are not.
 *
 * Netty's leak detector watches network buffers as it watches its own (sampled at its default
 * level, every one at `-Dio.netty.leakDetection.level=paranoid`): a buffer collected by the
 * garbage collector before its last release, whose segment is lost to its pool, is reported.
 */
final class NetworkBuffer(val segment: MemorySegment, recycler: BufferRecycler)
  extends UnpooledUnsafeDirectByteBuf(UnpooledByteBufAllocator.DEFAULT, segment.byteBuffer.duplicate(), segment.size) {

  clear()

  private val leak: ResourceLeakTracker[NetworkBuffer] = NetworkBuffer.leakDetector.track(this)

  override protected def deallocate(): Unit = {
    if (leak != null) leak.close(this)
    recycler.recycle(segment)
  }

  override def toString: String = s"NetworkBuffer(refCnt=${refCnt()}, r=$readerIndex, w=$writerIndex, $segment)"
}

private object NetworkBuffer {
  val leakDetector: ResourceLeakDetector[NetworkBuffer] =
    ResourceLeakDetectorFactory.instance().newResourceLeakDetector(classOf[NetworkBuffer])
}
