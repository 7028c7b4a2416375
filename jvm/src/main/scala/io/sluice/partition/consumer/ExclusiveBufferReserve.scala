package io.sluice.partition.consumer

import io.sluice.memory.{MemorySegment, NetworkBufferPool}

/**
 * The exclusive segments of one input gate: what its remote channels hold as initial credit, and
 * the idle ones waiting for the gate's next channel. A channel that ends gives its segments back
 * here, and the gate's next channel takes them without going to the [[NetworkBufferPool]]; once
 * the gate has no channel left to request, or closes, segments go back to that pool instead.
 * Flink's counterpart is the exclusive part of a gate's BufferManagers, bounded per gate as
 * FLINK-30473 bounds a gate's required buffers.
 *
 * [[take]] belongs to the gate's task thread; [[recycle]] is called from any thread (a channel's
 * release, or the task releasing an exclusive buffer late). The reserve's monitor guards it; the
 * global pool is never called while holding it.
 */
private[consumer] final class ExclusiveBufferReserve(global: NetworkBufferPool, owner: String, timeoutMs: Long) {

  private val idle = new java.util.ArrayDeque[MemorySegment]()
  private var held = 0 // segments taken from the global pool and not given back
  private var keeping = true // the gate still has channels to request: keep what comes back
  private var closed = false

  /**
   * `n` segments for one channel: from the idle ones, topped up from the global pool. With
   * `mayWait` the request waits (up to the bufferRequestTimeout) for other pools and gates to
   * give segments back; without it, it takes only segments free right now and answers null when
   * there are none (the gate then requests the channel later).
   */
  def take(n: Int, mayWait: Boolean): java.util.List[MemorySegment] = {
    val missing = synchronized {
      checkOpen()
      if (idle.size >= n) return takeIdleLocked(n)
      n - idle.size
    }
    val more =
      if (mayWait) global.requestUnpooledSegments(missing, timeoutMs, s"$owner (${held + missing} exclusive buffers)")
      else global.tryRequestUnpooledSegments(missing)
    if (more == null) return null
    synchronized {
      if (!closed) {
        held += more.size
        idle.addAll(more)
        return takeIdleLocked(n)
      }
    }
    global.recycleUnpooledSegments(more)
    checkOpen()
    null
  }

  /** Adds `n` segments to the idle ones, waiting for them (a pipelined gate takes all at once). */
  def fill(n: Int): Unit = if (n > 0) {
    val more = global.requestUnpooledSegments(n, timeoutMs, s"$owner ($n exclusive buffers for all its channels)")
    val keep = synchronized {
      if (!closed) { held += n; idle.addAll(more) }
      !closed
    }
    if (!keep) { global.recycleUnpooledSegments(more); checkOpen() }
  }

  /** Takes in `segments` the gate got from the global pool for its first channels (a closed reserve gives them back). */
  def adopt(segments: java.util.List[MemorySegment]): Unit = if (!segments.isEmpty) {
    val keep = synchronized {
      if (!closed) { held += segments.size; idle.addAll(segments) }
      !closed
    }
    if (!keep) global.recycleUnpooledSegments(segments)
  }

  /** Segments a channel no longer needs: kept for the next channel, or given back to the executor. */
  def recycle(segments: java.util.Collection[MemorySegment]): Unit = {
    val toGlobal = synchronized {
      if (keeping && !closed) { idle.addAll(segments); false }
      else { held -= segments.size; true }
    }
    if (toGlobal) global.recycleUnpooledSegments(segments)
  }

  /** The gate requested its last channel: idle segments go back, and so will every returning one. */
  def stopKeeping(): Unit = giveBackIdle(close = false)

  /** The gate closed: like [[stopKeeping]], and [[take]] fails from now on. Idempotent. */
  def close(): Unit = giveBackIdle(close = true)

  private def giveBackIdle(close: Boolean): Unit = {
    val back = synchronized {
      if (!keeping && idle.isEmpty && (closed || !close)) return
      keeping = false
      if (close) closed = true
      val b = new java.util.ArrayList[MemorySegment](idle)
      idle.clear()
      held -= b.size
      b
    }
    global.recycleUnpooledSegments(back)
  }

  private def takeIdleLocked(n: Int): java.util.List[MemorySegment] = {
    val out = new java.util.ArrayList[MemorySegment](n)
    while (out.size < n) out.add(idle.poll())
    out
  }

  private def checkOpen(): Unit = if (synchronized(closed)) throw new IllegalStateException(s"$owner: the input gate is closed")

  /** Segments this gate holds from the global pool: idle here or owned by its channels. */
  def numHeld: Int = synchronized(held)

  /** Segments idle here, waiting for the gate's next channel. */
  def numIdle: Int = synchronized(idle.size)
}
