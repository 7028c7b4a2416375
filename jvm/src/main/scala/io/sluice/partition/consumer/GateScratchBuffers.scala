package io.sluice.partition.consumer

import io.netty.buffer.ByteBuf
import io.sluice.memory.{BufferRecycler, MemorySegment, NetworkBuffer, NetworkBufferPool}

/**
 * The scratch buffers of one [[SingleInputGate]]: unpooled segments, counted in the network
 * memory, taken when the gate starts reading. A [[LocalInputChannel]] reads spilled local data
 * into one, the gate's [[InputBufferDecoder]] decompresses into the other. Each is lent to one
 * buffer at a time: the task releases the slice it was handed before asking for the next.
 *
 * Taken by the gate's task thread; closed from any thread. The monitor guards both.
 */
private[consumer] final class GateScratchBuffers(
    owner: String,
    networkBufferPool: NetworkBufferPool,
    bufferRequestTimeoutMs: Long,
    decoder: InputBufferDecoder) {

  private var segments: java.util.List[MemorySegment] = java.util.Collections.emptyList()
  private var readScratch: NetworkBuffer = _
  private var closed = false

  /**
   * Takes the segments the gate needs: one to read into when `readBuffer` (some local channel
   * reads a spilled partition), one to decompress into when the decoder decompresses. Waits for
   * the executor's memory as any exclusive request does. False, holding nothing, when the gate
   * closed meanwhile.
   */
  def take(readBuffer: Boolean): Boolean = {
    val n = (if (readBuffer) 1 else 0) + (if (decoder.needsDecompressScratch) 1 else 0)
    if (n == 0) return true
    val taken = networkBufferPool.requestUnpooledSegments(n, bufferRequestTimeoutMs, s"$owner (scratch buffers)")
    val open = synchronized {
      if (!closed) {
        segments = taken
        var i = 0
        if (readBuffer) { readScratch = new NetworkBuffer(taken.get(i), GateScratchBuffers.NoRecycle); i += 1 }
        if (decoder.needsDecompressScratch) {
          decoder.decompressScratch = new NetworkBuffer(taken.get(i), GateScratchBuffers.NoRecycle)
        }
      }
      !closed
    }
    if (!open) networkBufferPool.recycleUnpooledSegments(taken)
    open
  }

  /** The scratch buffer a local channel reads a spilled buffer of `length` bytes into. */
  def readBuffer(length: Int, previousNotReleased: => Exception): ByteBuf = {
    if (readScratch == null) throw new IllegalStateException(s"$owner has no read buffer for spilled local data")
    if (readScratch.refCnt() != 1) throw previousNotReleased
    if (length > readScratch.capacity()) {
      throw new CorruptBufferException(s"A spilled buffer of $length bytes does not fit a ${readScratch.capacity()}-byte segment")
    }
    readScratch.retainedSlice(0, length).clear()
  }

  /**
   * Drops the gate's own references to its scratch buffers (a slice the task still holds keeps
   * its own) and returns their segments, which the caller gives back to the executor once its
   * channels are released. Idempotent: a second close returns none.
   */
  def close(): java.util.List[MemorySegment] = {
    val (s, buffers) = synchronized {
      val s = segments
      val b = if (closed) Nil else Seq(readScratch, decoder.decompressScratch).filter(_ != null)
      closed = true
      segments = java.util.Collections.emptyList()
      (s, b)
    }
    buffers.foreach(_.release())
    s
  }
}

private object GateScratchBuffers {

  /** Scratch segments stay with the gate; releasing their last slice must not recycle them. */
  object NoRecycle extends BufferRecycler {
    override def recycle(segment: MemorySegment): Unit = ()
  }
}
