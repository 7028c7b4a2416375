package io.sluice.memory

import java.util.concurrent.TimeoutException

import scala.collection.mutable

/**
 * The executor-wide pool of network memory (Flink's NetworkBufferPool): a fixed number of
 * equally sized off-heap segments, allocated on first use and reused for the executor's life.
 *
 * It serves two kinds of clients. [[LocalBufferPool]]s (one per result partition and per input
 * gate) draw "pooled" segments up to a size this pool assigns them: every pool gets its required
 * number, and what is left is shared out so that each pool gets the same share (±1), capped at
 * its maximum. Remote input channels take "unpooled" exclusive segments directly; those count as
 * required, like a pool's minimum.
 *
 * Thread-safe: one lock guards the free list and the pool sizes. Local pools are called back
 * (to shrink, or because segments became available) outside that lock.
 */
final class NetworkBufferPool(val totalSegments: Int, val segmentSize: Int) {
  require(totalSegments > 0, s"a NetworkBufferPool needs at least one segment, not $totalSegments")

  private val lock = new Object
  private val free = new java.util.ArrayDeque[MemorySegment]()
  private var numAllocated = 0
  private var numRequiredBuffers = 0          // minimums of all pools + unpooled segments handed out
  private var numUnpooledInUse = 0
  private val pools = mutable.LinkedHashSet.empty[LocalBufferPool]
  private val waitingPools = new java.util.ArrayDeque[LocalBufferPool]()
  private var destroyed = false
  private var redistributions = 0L            // numbers each computed distribution, newest highest

  // ---- pooled segments (LocalBufferPools) -------------------------------------------------

  /** A segment for a local pool, or null when every segment is in use. Never blocks. */
  private[memory] def requestPooledSegment(waiter: LocalBufferPool): MemorySegment = lock.synchronized {
    val s = takeOne()
    if (s == null && waiter != null && !waitingPools.contains(waiter)) waitingPools.add(waiter)
    s
  }

  private[memory] def recyclePooledSegment(segment: MemorySegment): Unit = {
    val toNotify = lock.synchronized {
      if (destroyed) java.util.Collections.emptyList[LocalBufferPool]()
      else {
        free.add(segment)
        lock.notifyAll() // exclusive-buffer requests waiting in requestUnpooledSegments
        // Every waiting pool is told: one that no longer needs the segment must not keep it from
        // the others. Those that still find none register again.
        val w = new java.util.ArrayList[LocalBufferPool](waitingPools); waitingPools.clear(); w
      }
    }
    toNotify.forEach(_.onGlobalSegmentsAvailable())
  }

  // ---- unpooled segments (exclusive buffers of remote input channels) ----------------------

  /**
   * Takes `n` segments out of the redistribution, waiting up to `timeoutMs` for other pools to
   * hand back their excess. Fails at once when `n` more required segments can never fit.
   */
  def requestUnpooledSegments(n: Int, timeoutMs: Long, owner: String): java.util.List[MemorySegment] = {
    lock.synchronized {
      if (destroyed) throw new IllegalStateException("The network buffer pool is destroyed")
      if (numRequiredBuffers + n > totalSegments) {
        throw new InsufficientNetworkBuffersException(s"$owner needs $n exclusive network buffers, but only " +
          s"${totalSegments - numRequiredBuffers} of $totalSegments are not already required by other pools")
      }
      numRequiredBuffers += n
    }
    redistribute()
    val out = new java.util.ArrayList[MemorySegment](n)
    val deadline = System.nanoTime() + timeoutMs * 1000000L
    try {
      lock.synchronized {
        while (out.size < n) {
          val s = takeOne()
          if (s != null) { out.add(s); numUnpooledInUse += 1 }
          else {
            val left = deadline - System.nanoTime()
            if (left <= 0) {
              throw new TimeoutException(s"$owner waited ${timeoutMs}ms for ${n - out.size} of $n exclusive " +
                "network buffers (spark.sluice.network.bufferRequestTimeout); the executor's other pools did not " +
                "give them back")
            }
            lock.wait(math.max(1L, left / 1000000L))
          }
        }
      }
      out
    } catch {
      case e: Throwable =>
        recycleUnpooledSegments(out, returnRequirement = false)
        lock.synchronized { numRequiredBuffers -= n }
        redistribute()
        throw e
    }
  }

  /** Returns exclusive segments; they no longer count as required. */
  def recycleUnpooledSegments(segments: java.util.Collection[MemorySegment]): Unit =
    recycleUnpooledSegments(segments, returnRequirement = true)

  private def recycleUnpooledSegments(segments: java.util.Collection[MemorySegment], returnRequirement: Boolean): Unit = {
    if (segments.isEmpty && !returnRequirement) return
    val toNotify = lock.synchronized {
      if (!destroyed) free.addAll(segments)
      numUnpooledInUse -= segments.size
      if (returnRequirement) numRequiredBuffers -= segments.size
      lock.notifyAll()
      val w = new java.util.ArrayList[LocalBufferPool](waitingPools); waitingPools.clear(); w
    }
    if (returnRequirement) redistribute()
    toNotify.forEach(_.onGlobalSegmentsAvailable())
  }

  // ---- local pools ---------------------------------------------------------------------------

  /**
   * Creates a local pool that always gets `required` segments and at most `max`. Fails when the
   * executor cannot give every pool its minimum, naming the setting to raise.
   */
  def createBufferPool(required: Int, max: Int, owner: String): LocalBufferPool = {
    require(required >= 0 && max >= required && max > 0, s"bad buffer pool bounds [$required, $max] for $owner")
    val pool = new LocalBufferPool(this, required, max, owner)
    lock.synchronized {
      if (destroyed) throw new IllegalStateException("The network buffer pool is destroyed")
      if (numRequiredBuffers + required > totalSegments) {
        throw new InsufficientNetworkBuffersException(s"$owner needs at least $required network buffers, but only " +
          s"${totalSegments - numRequiredBuffers} of $totalSegments are not already required by other pools")
      }
      numRequiredBuffers += required
      pools += pool
    }
    redistribute()
    pool
  }

  private[memory] def destroyBufferPool(pool: LocalBufferPool): Unit = {
    val removed = lock.synchronized {
      val r = pools.remove(pool)
      if (r) numRequiredBuffers -= pool.numberOfRequiredSegments
      waitingPools.remove(pool)
      r
    }
    if (removed) redistribute()
  }

  /**
   * Gives every pool its minimum plus an equal share (±1) of the segments nobody requires,
   * water-filling around pools whose maximum is lower than the share. Sizes are computed under
   * the lock and applied outside it; each distribution is numbered so that a pool ignores one
   * older than what it already applied (two threads redistributing at once).
   */
  private def redistribute(): Unit = {
    var generation = 0L
    val sizes: Seq[(LocalBufferPool, Int)] = lock.synchronized {
      redistributions += 1
      generation = redistributions
      if (pools.isEmpty) Nil
      else {
        var excess = totalSegments - numRequiredBuffers
        val byRoom = pools.toSeq.sortBy(p => p.maxNumberOfSegments - p.numberOfRequiredSegments)
        var left = byRoom.size
        byRoom.map { p =>
          val room = p.maxNumberOfSegments - p.numberOfRequiredSegments
          val share = if (left == 0) 0 else (excess + left - 1) / left
          val extra = math.max(0, math.min(room, share))
          excess -= extra
          left -= 1
          p -> (p.numberOfRequiredSegments + extra)
        }
      }
    }
    sizes.foreach { case (p, n) => p.setNumBuffers(n, generation) }
  }

  private def takeOne(): MemorySegment = {
    val s = free.poll()
    if (s != null) s
    else if (numAllocated < totalSegments) {
      numAllocated += 1
      try MemorySegment.allocateOffHeap(segmentSize)
      catch {
        case e: OutOfMemoryError =>
          numAllocated -= 1
          throw new OutOfMemoryError(s"Could not allocate a ${segmentSize}-byte direct network buffer " +
            s"($numAllocated of $totalSegments allocated, spark.sluice.network.memory); raise " +
            s"-XX:MaxDirectMemorySize or lower spark.sluice.network.memory: ${e.getMessage}")
      }
    } else null
  }

  // ---- metrics -------------------------------------------------------------------------------

  /** Segments not held by any pool, channel or buffer (allocated or not yet allocated). */
  def numberOfAvailableSegments: Int = lock.synchronized(free.size + (totalSegments - numAllocated))

  def numberOfUsedSegments: Int = totalSegments - numberOfAvailableSegments

  def numberOfAllocatedSegments: Int = lock.synchronized(numAllocated)

  def numberOfRequiredSegments: Int = lock.synchronized(numRequiredBuffers)

  def numberOfPools: Int = lock.synchronized(pools.size)

  /** Frees every idle segment; segments still in use are dropped when they come back. */
  def destroy(): Unit = lock.synchronized {
    destroyed = true
    free.clear()
    lock.notifyAll()
  }

  override def toString: String =
    s"NetworkBufferPool(total=$totalSegments, available=$numberOfAvailableSegments, pools=$numberOfPools)"
}

/** The executor's network memory cannot give a pool or a channel its minimum. */
final class InsufficientNetworkBuffersException(msg: String)
  extends java.io.IOException(msg + "; raise spark.sluice.network.memory or lower " +
    "spark.sluice.network.buffersPerChannel / floatingBuffersPerGate")
