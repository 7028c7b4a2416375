package io.sluice.partition.consumer

import io.netty.buffer.ByteBuf
import io.sluice.memory.{BufferRecycler, MemorySegment, NetworkBuffer, NetworkBufferPool}

/**
 * The scratch buffers of one [[SingleInputGate]]: unpooled segments, counted in the network
 * memory, taken when the gate starts reading. A [[LocalInputChannel]] reads spilled local data
 * into one, the gate's [[InputBufferDecoder]] decompresses into the other. Each is lent to one
 * buffer at a time: the task releases the slice it was handed before asking for the next. A
 * segment goes back to the executor when its last reference does: the gate's own, dropped at
 * [[close]], and the slice the task may still hold (a gate closed by another thread, e.g. a killed
 * task's completion listener, while its task reads).
 *
 * Taken by the gate's task thread; closed from any thread. The monitor guards both.
 */
private[consumer] final class GateScratchBuffers(
    owner: String,
    networkBufferPool: NetworkBufferPool,
    bufferRequestTimeoutMs: Long,
    decoder: InputBufferDecoder) {

  private var readScratch: NetworkBuffer = _
  private var closed = false

  // Gives a scratch segment back to the executor once the last reference to its buffer is gone.
  private val giveBack: BufferRecycler = (segment: MemorySegment) =>
    networkBufferPool.recycleUnpooledSegments(java.util.List.of(segment))

  /**
   * Takes the segments the gate needs: one to read into when `readBuffer` (some local channel
   * reads a spilled partition), one to decompress into when the decoder decompresses, and
   * `withExclusive` more in the same request, returned for the gate's first channels: one
   * all-or-nothing wait, so two starting gates never each hold a part of what both need. Waits for
   * the executor's memory as any exclusive request does. Null, holding nothing, when the gate
   * closed meanwhile.
   */
  def take(readBuffer: Boolean, withExclusive: Int = 0): java.util.List[MemorySegment] = {
    val n = (if (readBuffer) 1 else 0) + (if (decoder.needsDecompressScratch) 1 else 0)
    if (n + withExclusive == 0) return java.util.List.of()
    val taken = networkBufferPool.requestUnpooledSegments(n + withExclusive, bufferRequestTimeoutMs,
      if (withExclusive == 0) s"$owner (scratch buffers)" else s"$owner ($n scratch and $withExclusive exclusive buffers)")
    val open = synchronized {
      if (!closed) {
        var i = 0
        if (readBuffer) { readScratch = new NetworkBuffer(taken.get(i), giveBack); i += 1 }
        if (decoder.needsDecompressScratch) decoder.decompressScratch = new NetworkBuffer(taken.get(i), giveBack)
      }
      !closed
    }
    if (!open) { networkBufferPool.recycleUnpooledSegments(taken); null }
    else new java.util.ArrayList[MemorySegment](taken.subList(n, n + withExclusive))
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

  /** Scratch segments taken and not given back by [[close]]. */
  def numHeld: Int = synchronized(if (closed) 0 else Seq(readScratch, decoder.decompressScratch).count(_ != null))

  /**
   * Drops the gate's own references to its scratch buffers: a segment goes back to the executor
   * now, or when the task releases the slice it still holds. Idempotent.
   */
  def close(): Unit = {
    val buffers = synchronized {
      val b = if (closed) Nil else Seq(readScratch, decoder.decompressScratch).filter(_ != null)
      closed = true
      b
    }
    buffers.foreach(_.release())
  }
}
