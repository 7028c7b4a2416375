package io.sluice.memory

import java.util.concurrent.TimeoutException
import java.util.concurrent.atomic.LongAdder

/**
 * The buffers of one result partition or one input gate (Flink's LocalBufferPool). It draws
 * segments from the executor's [[NetworkBufferPool]] up to the size that pool assigns it (at least
 * `numberOfRequiredSegments`, at most `maxNumberOfSegments`), keeps recycled segments for reuse,
 * and gives segments beyond its current size back.
 *
 * Requests come in two forms: non-blocking ([[requestBuffer]], null when none is free) and
 * blocking with a timeout ([[requestBufferBlocking]], where a producer waits when its consumers
 * hold every buffer: this wait *is* backpressure, and its duration is measured). A
 * [[BufferListener]] may wait for the next recycled buffer instead.
 *
 * [[lazyDestroy]] ends the pool for good (its partition was released, its gate closed): from then
 * on every request answers null, as Flink's `requestBuffer()` does after `lazyDestroy`, and wakes
 * or tells whoever waits. A caller that must tell "none now" from "never again" asks
 * [[isDestroyed]] after the null: destruction is final, so a pool that answered null because it
 * was destroyed still says so, and one destroyed just after answering null tells its listeners.
 *
 * Thread-safe; the pool's own monitor guards its state. Lock order: this pool, then the global pool.
 */
final class LocalBufferPool private[memory] (
    global: NetworkBufferPool,
    val numberOfRequiredSegments: Int,
    val maxNumberOfSegments: Int,
    val owner: String) extends BufferRecycler {

  private val available = new java.util.ArrayDeque[MemorySegment]()
  private val listeners = new java.util.ArrayDeque[BufferListener]()
  private var numRequested = 0 // segments held: free here or inside live buffers
  private var currentPoolSize = numberOfRequiredSegments
  private var sizeGeneration = 0L // the global pool's distribution currentPoolSize comes from
  private var destroyed = false
  // Threads blocked in requestBufferBlocking, and how many free buffers wake them. Above 1 only
  // while exactly one thread waits and asked for a low-water mark (see requestBufferBlocking).
  private var numWaiters = 0
  private var wakeAtFree = 1

  /** Nanoseconds threads spent blocked in [[requestBufferBlocking]] (backPressuredTime). */
  val backPressuredTimeNanos = new LongAdder

  def segmentSize: Int = global.segmentSize

  /** A buffer, or null when none is free and the pool may not grow right now, or it is destroyed. Never blocks. */
  def requestBuffer(): NetworkBuffer = {
    val s = synchronized(requestSegmentLocked())
    if (s == null) null else new NetworkBuffer(s, this)
  }

  /**
   * A buffer, waiting up to `timeoutMs` for one to be recycled or for the executor to hand this
   * pool more; null when the pool is destroyed, before or during the wait. The wait is
   * backpressure: its time is added to [[backPressuredTimeNanos]].
   *
   * With `lowWater` > 1 a producer that had to wait is woken once that many buffers are free
   * again, not by every buffer its readers give back: it then fills them in one go instead of
   * being woken, and sleeping again, once per buffer (at 10 KiB records one connection's producer
   * blocked about 0.7 times per buffer). The mark applies only while this thread is the pool's
   * only waiter and for the first `lowWaterMaxWaitNanos` of its wait (rounded up to whole
   * milliseconds, as `Object.wait` counts); after that any free buffer wakes it, so buffers that
   * never come back (a reader holding some) delay it, never stall it. A pool that may grow, or a
   * shrunken pool with fewer buffers than the mark, wakes it as before.
   */
  def requestBufferBlocking(
      timeoutMs: Long,
      lowWater: Int = 1,
      lowWaterMaxWaitNanos: Long = LocalBufferPool.LowWaterMaxWaitNanos): NetworkBuffer = {
    val first = requestBuffer()
    if (first != null) return first
    val start = System.nanoTime()
    val deadline = start + timeoutMs * 1000000L
    try {
      synchronized {
        var s = requestSegmentLocked()
        while (s == null) {
          if (destroyed) return null
          val now = System.nanoTime()
          val left = deadline - now
          if (left <= 0) {
            throw new TimeoutException(s"Waited ${timeoutMs}ms for a network buffer of $owner " +
              s"(spark.sluice.network.bufferRequestTimeout): all $currentPoolSize buffers stayed in use; " +
              "its consumers are not reading")
          }
          val batchLeft = start + lowWaterMaxWaitNanos - now
          val mark = if (numWaiters == 0 && batchLeft > 0) math.min(lowWater, currentPoolSize) else 1
          numWaiters += 1
          wakeAtFree = if (numWaiters == 1) math.max(1, mark) else 1
          try wait(math.max(1L, (if (mark > 1) math.min(left, batchLeft) else left) / 1000000L))
          finally { numWaiters -= 1; wakeAtFree = 1 }
          if (mark <= 1 || available.size >= mark || numRequested < currentPoolSize || destroyed ||
            System.nanoTime() - start >= lowWaterMaxWaitNanos) {
            s = requestSegmentLocked()
          }
        }
        new NetworkBuffer(s, this)
      }
    } finally {
      val waited = System.nanoTime() - start
      backPressuredTimeNanos.add(waited)
      BufferRequestWaits.add(waited)
    }
  }

  /**
   * A buffer now, or null after registering `listener` for the next buffer this pool gets back.
   * Checking and registering happen atomically, so no recycled buffer slips past the listener. A
   * destroyed pool answers null without registering it: nothing will come ([[isDestroyed]] tells).
   */
  def requestBufferOrListen(listener: BufferListener): NetworkBuffer = {
    val s = synchronized {
      val seg = requestSegmentLocked()
      if (seg == null && !destroyed) listeners.add(listener)
      seg
    }
    if (s == null) null else new NetworkBuffer(s, this)
  }

  def removeListener(listener: BufferListener): Unit = synchronized(listeners.remove(listener))

  /** A segment, or null when none is free and the pool may not grow, or it is destroyed. Lock held. */
  private def requestSegmentLocked(): MemorySegment = {
    if (destroyed) return null
    var s = available.poll()
    if (s == null && numRequested < currentPoolSize) {
      s = global.requestPooledSegment(this)
      if (s != null) numRequested += 1
    }
    s
  }

  override def recycle(segment: MemorySegment): Unit = {
    var toGlobal = false
    var listener: BufferListener = null
    synchronized {
      if (destroyed || numRequested > currentPoolSize) {
        numRequested -= 1
        toGlobal = true
      } else {
        listener = listeners.poll()
        if (listener == null) {
          available.add(segment)
          if (numWaiters > 0 && available.size >= wakeAtFree) notifyAll()
        }
      }
    }
    if (toGlobal) global.recyclePooledSegment(segment)
    else if (listener != null) offer(listener, new NetworkBuffer(segment, this))
  }

  /** Hands `buffer` to a listener; a refusal releases it, which recycles it to the next one. */
  private def offer(listener: BufferListener, buffer: NetworkBuffer): Unit = {
    val taken =
      try listener.notifyBufferAvailable(buffer)
      catch {
        case e: Throwable => buffer.release(); throw e
      }
    if (!taken) buffer.release()
  }

  /** Called by the global pool (outside its lock) when segments came back to it. */
  private[memory] def onGlobalSegmentsAvailable(): Unit = {
    synchronized(notifyAll())
    serveListeners()
  }

  /** Gives listeners segments the pool may now draw from the global pool. */
  private def serveListeners(): Unit = {
    var next: (BufferListener, MemorySegment) = null
    do {
      next = synchronized {
        if (destroyed || listeners.isEmpty) null
        else {
          val s = requestSegmentLocked()
          if (s == null) null else (listeners.poll(), s)
        }
      }
      if (next != null) offer(next._1, new NetworkBuffer(next._2, this))
    } while (next != null)
  }

  /**
   * The global pool's redistribution number `generation`: this pool may now hold `n` segments.
   * A distribution older than the one already applied is stale and ignored.
   */
  private[memory] def setNumBuffers(n: Int, generation: Long): Unit = {
    val excess = new java.util.ArrayList[MemorySegment]()
    synchronized {
      if (generation < sizeGeneration) return
      sizeGeneration = generation
      currentPoolSize = math.min(math.max(n, numberOfRequiredSegments), maxNumberOfSegments)
      while (numRequested > currentPoolSize && !available.isEmpty) {
        excess.add(available.poll())
        numRequested -= 1
      }
      notifyAll()
    }
    excess.forEach(s => global.recyclePooledSegment(s))
    serveListeners()
  }

  /**
   * Destroys the pool: free segments go back at once, segments still inside buffers when those
   * are released, and waiting listeners learn that nothing will come.
   */
  def lazyDestroy(): Unit = {
    val (free, waiting) = synchronized {
      if (destroyed) return
      destroyed = true
      val f = new java.util.ArrayList[MemorySegment](available)
      available.clear()
      numRequested -= f.size
      val w = new java.util.ArrayList[BufferListener](listeners)
      listeners.clear()
      notifyAll()
      (f, w)
    }
    free.forEach(s => global.recyclePooledSegment(s))
    waiting.forEach(_.notifyBufferDestroyed())
    global.destroyBufferPool(this)
  }

  def isDestroyed: Boolean = synchronized(destroyed)

  // ---- metrics -------------------------------------------------------------------------------

  /** The size the global pool currently assigns this pool. */
  def numBuffers: Int = synchronized(currentPoolSize)

  /** Buffers currently held by writers, queues or readers (not free in this pool). */
  def numUsedBuffers: Int = synchronized(numRequested - available.size)

  /** Segments drawn from the global pool and not yet given back (free here or in use). */
  def numRequestedSegments: Int = synchronized(numRequested)

  /** Used buffers over the pool's size: outPoolUsage / floatingBuffersUsage. */
  def usage: Float = synchronized {
    if (currentPoolSize == 0) 0f else math.min(1f, (numRequested - available.size).toFloat / currentPoolSize)
  }

  override def toString: String = synchronized(
    s"LocalBufferPool($owner, size=$currentPoolSize [$numberOfRequiredSegments, $maxNumberOfSegments], " +
      s"requested=$numRequested, free=${available.size}, listeners=${listeners.size}, destroyed=$destroyed)")
}

object LocalBufferPool {

  /**
   * How long a blocked producer waits for its low-water mark of free buffers before any free
   * buffer will do (see [[LocalBufferPool.requestBufferBlocking]]). A running connection frees
   * a 32 KiB buffer every 10-100 microseconds, so a mark of a few buffers is reached far sooner.
   */
  val LowWaterMaxWaitNanos: Long = 1000000L
}
