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
 * its maximum. Input gates take "unpooled" exclusive segments directly for their remote
 * channels; those count as required, like a pool's minimum.
 *
 * A requirement that does not fit now is backpressure, not an error: the request waits (up to a
 * timeout, spark.sluice.network.bufferRequestTimeout) for other pools and gates to give theirs
 * back, and fails at once only when it could never fit (more than every segment of the executor).
 * [[tryRequestUnpooledSegments]] never waits: a gate that already reads something uses it to
 * open more channels only while segments are free and headroom is left for others' minimums.
 *
 * Thread-safe: one lock guards the free list and the pool sizes. Local pools are called back
 * (to shrink, or because segments became available) outside that lock.
 *
 * @param defaultRequestTimeoutMs how long [[createBufferPool]] without a timeout waits for room
 */
final class NetworkBufferPool(val totalSegments: Int, val segmentSize: Int, defaultRequestTimeoutMs: Long = 300000L) {
  require(totalSegments > 0, s"a NetworkBufferPool needs at least one segment, not $totalSegments")

  private val lock = new Object
  private val free = new java.util.ArrayDeque[MemorySegment]()
  private var numAllocated = 0
  private var numRequiredBuffers = 0 // minimums of all pools + unpooled segments handed out
  private var numUnpooledInUse = 0
  private var numWaitingForRoom = 0 // requests waiting for their requirement to fit
  private val pools = mutable.LinkedHashSet.empty[LocalBufferPool]
  private val waitingPools = new java.util.ArrayDeque[LocalBufferPool]()
  private var destroyed = false
  private var redistributions = 0L // numbers each computed distribution, newest highest

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

  // ---- required segments -------------------------------------------------------------------

  /**
   * Adds `n` to the required segments, waiting until `deadline` (System.nanoTime) while they do
   * not fit next to what others require. Fails at once when `n` can never fit. Lock held.
   */
  private def reserveRequirementLocked(n: Int, deadline: Long, timeoutMs: Long, what: => String): Unit = {
    if (destroyed) throw new IllegalStateException("The network buffer pool is destroyed")
    if (n > totalSegments) {
      throw new InsufficientNetworkBuffersException(s"$what, more than all $totalSegments network buffers " +
        "of the executor")
    }
    if (numRequiredBuffers + n > totalSegments) {
      numWaitingForRoom += 1
      try {
        while (numRequiredBuffers + n > totalSegments) {
          val left = deadline - System.nanoTime()
          if (left <= 0) {
            throw new TimeoutException(s"$what; waited ${timeoutMs}ms (spark.sluice.network.bufferRequestTimeout) " +
              s"but the executor's other pools and gates still require ${numRequiredBuffers} of its $totalSegments " +
              "network buffers")
          }
          BufferRequestWaits.time(lock.wait(math.max(1L, left / 1000000L)))
          if (destroyed) throw new IllegalStateException("The network buffer pool is destroyed")
        }
      } finally numWaitingForRoom -= 1
    }
    numRequiredBuffers += n
  }

  /** Gives back `n` required segments (lock held); waiting requests may now fit. */
  private def releaseRequirementLocked(n: Int): Unit = {
    numRequiredBuffers -= n
    if (n > 0) lock.notifyAll()
  }

  // ---- unpooled segments (exclusive buffers of remote input channels) ----------------------

  /**
   * Takes `n` segments out of the redistribution, waiting up to `timeoutMs` in all, first for the
   * requirement to fit next to the other pools' and gates' (they give theirs back as they finish),
   * then for pools to hand back the excess they must shed. Fails at once when `n` is more than the
   * executor has. An interrupt or timeout gives back everything taken.
   */
  def requestUnpooledSegments(n: Int, timeoutMs: Long, owner: String): java.util.List[MemorySegment] = {
    val deadline = System.nanoTime() + timeoutMs * 1000000L
    lock.synchronized(reserveRequirementLocked(n, deadline, timeoutMs, s"$owner needs $n exclusive network buffers"))
    redistribute()
    val out = new java.util.ArrayList[MemorySegment](n)
    try {
      lock.synchronized {
        while (out.size < n) {
          val s = takeOne()
          if (s != null) { out.add(s); numUnpooledInUse += 1 }
          else {
            if (destroyed) throw new IllegalStateException("The network buffer pool is destroyed")
            val left = deadline - System.nanoTime()
            if (left <= 0) {
              throw new TimeoutException(s"$owner waited ${timeoutMs}ms for ${n - out.size} of $n exclusive " +
                "network buffers (spark.sluice.network.bufferRequestTimeout); the executor's other pools did not " +
                "give them back")
            }
            BufferRequestWaits.time(lock.wait(math.max(1L, left / 1000000L)))
          }
        }
      }
      out
    } catch {
      case e: Throwable =>
        recycleUnpooledSegments(out, returnRequirement = false)
        lock.synchronized(releaseRequirementLocked(n))
        redistribute()
        throw e
    }
  }

  /**
   * `n` segments now, or null: never waits. It succeeds only when nobody waits for room, the
   * required total stays within `maxRequiredFraction` of the executor's segments (headroom for
   * other pools' minimums and other gates' first channels), and `n` segments are free right now.
   */
  def tryRequestUnpooledSegments(
      n: Int, maxRequiredFraction: Double = NetworkBufferPool.OpportunisticShare): java.util.List[MemorySegment] = {
    require(n > 0, s"asked for $n segments")
    val out = lock.synchronized {
      if (destroyed || numWaitingForRoom > 0 || numRequiredBuffers + n > (totalSegments * maxRequiredFraction).toLong ||
        free.size + (totalSegments - numAllocated) < n) null
      else {
        val o = new java.util.ArrayList[MemorySegment](n)
        while (o.size < n) o.add(takeOne())
        numUnpooledInUse += n
        numRequiredBuffers += n
        o
      }
    }
    if (out != null) redistribute()
    out
  }

  /** Returns exclusive segments; they no longer count as required. */
  def recycleUnpooledSegments(segments: java.util.Collection[MemorySegment]): Unit =
    recycleUnpooledSegments(segments, returnRequirement = true)

  private def recycleUnpooledSegments(segments: java.util.Collection[MemorySegment], returnRequirement: Boolean): Unit = {
    if (segments.isEmpty) return
    val toNotify = lock.synchronized {
      if (!destroyed) free.addAll(segments)
      numUnpooledInUse -= segments.size
      if (returnRequirement) releaseRequirementLocked(segments.size)
      lock.notifyAll()
      val w = new java.util.ArrayList[LocalBufferPool](waitingPools); waitingPools.clear(); w
    }
    if (returnRequirement) redistribute()
    toNotify.forEach(_.onGlobalSegmentsAvailable())
  }

  // ---- local pools ---------------------------------------------------------------------------

  /**
   * Creates a local pool that always gets `required` segments and at most `max`, waiting up to
   * `timeoutMs` while its minimum does not fit next to the other pools' (backpressure: they give
   * theirs back as their tasks end). Fails at once when `required` is more than the executor has,
   * naming the setting to raise.
   */
  def createBufferPool(required: Int, max: Int, owner: String, timeoutMs: Long): LocalBufferPool = {
    require(required >= 0 && max >= required && max > 0, s"bad buffer pool bounds [$required, $max] for $owner")
    val pool = new LocalBufferPool(this, required, max, owner)
    val deadline = System.nanoTime() + timeoutMs * 1000000L
    lock.synchronized {
      reserveRequirementLocked(required, deadline, timeoutMs, s"$owner needs at least $required network buffers")
      pools += pool
    }
    redistribute()
    pool
  }

  /** [[createBufferPool]] waiting at most this pool's default timeout (the executor's bufferRequestTimeout). */
  def createBufferPool(required: Int, max: Int, owner: String): LocalBufferPool =
    createBufferPool(required, max, owner, defaultRequestTimeoutMs)

  private[memory] def destroyBufferPool(pool: LocalBufferPool): Unit = {
    val removed = lock.synchronized {
      val r = pools.remove(pool)
      if (r) releaseRequirementLocked(pool.numberOfRequiredSegments)
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

object NetworkBufferPool {

  /**
   * The share of the executor's segments opportunistic exclusive requests may bring the required
   * total to: the rest stays for other pools' minimums and other gates' first channels.
   */
  val OpportunisticShare: Double = 0.75
}

/** A pool or a gate needs more network memory than the executor has: it could never fit. */
final class InsufficientNetworkBuffersException(msg: String)
  extends java.io.IOException(msg + "; raise spark.sluice.network.memory or lower " +
    "spark.sluice.network.buffersPerChannel / floatingBuffersPerGate / maxRequiredBuffersPerGate")
