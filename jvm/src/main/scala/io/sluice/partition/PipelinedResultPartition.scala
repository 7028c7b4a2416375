package io.sluice.partition

import java.util.concurrent.{CountDownLatch, TimeUnit, TimeoutException}
import java.util.concurrent.atomic.{AtomicBoolean, AtomicIntegerArray}

import io.sluice.buffer.{BufferBuilder, BufferConsumer}
import io.sluice.memory.LocalBufferPool
import io.sluice.writer.OutputFlusher

/**
 * A result partition consumed while it is produced (Flink's PipelinedResultPartition): one
 * in-memory [[PipelinedSubpartition]] per consumer, each read once. When consumers fall behind,
 * the producer blocks in [[requestBufferBuilder]], waiting for its pool or for room in the slow
 * subpartition: credit-based backpressure reaching the producer. After [[finish]], the producer
 * can wait until every consumer has read the end ([[awaitConsumed]]); then the partition
 * releases itself and its pool.
 *
 * With `idleFlushIntervalMs` >= 0 a record for an idle reader is flushed at once, at most once per
 * interval per subpartition; a record that comes inside the interval is flushed by `flusher` when
 * the interval ends (a deferred idle flush), not left for the buffer timeout. With
 * `checksumsInTransit` (Spark's spark.shuffle.streaming.checksum.enabled) the server sends each of
 * its buffers with the CRC32C of its bytes, which the remote reader verifies.
 */
final class PipelinedResultPartition(
    partitionId: ResultPartitionID,
    numSubpartitions: Int,
    bufferPool: LocalBufferPool,
    maxBuffersPerSubpartition: Int,
    bufferRequestTimeoutMs: Long,
    onReleased: PipelinedResultPartition => Unit = _ => (),
    val bufferTimeoutMs: Long = -1L,
    idleFlushIntervalMs: Long = -1L,
    flusher: Option[OutputFlusher] = None,
    val checksumsInTransit: Boolean = true)
  extends BufferWritingResultPartition(partitionId, ResultPartitionType.Pipelined, numSubpartitions, bufferPool) {

  private val subpartitions = Array.tabulate(numSubpartitions)(new PipelinedSubpartition(_, this))
  // Eager "idle" flushing (spark.sluice.idleFlushInterval): off with a -1 buffer timeout, and
  // pointless with 0 (every record is flushed anyway).
  private val idleFlushNanos =
    if (idleFlushIntervalMs < 0 || bufferTimeoutMs <= 0) -1L else idleFlushIntervalMs * 1000000L

  /** When each subpartition was last flushed at once for an idle reader (producer thread only). */
  private val lastIdleFlushNanos = Array.fill(numSubpartitions)(Long.MinValue / 2)

  // Deferred idle flushes only pay when the output flusher's own tick is further away than the
  // interval; at a buffer timeout <= the interval it flushes as soon, without the extra task.
  private val deferring = flusher.isDefined && idleFlushNanos >= 0 && bufferTimeoutMs > idleFlushIntervalMs

  /** When the last deferred idle flush of each subpartition is due (producer thread only). */
  private val deferredIdleFlushNanos = Array.fill(numSubpartitions)(Long.MinValue / 2)

  // Deferred idle flushes: the subpartitions waiting for one (1 = waiting; set by the producer,
  // cleared by the flusher's thread) and whether the one task that flushes them is scheduled.
  private val deferredIdleFlush = new AtomicIntegerArray(numSubpartitions)
  private val deferredIdleFlushScheduled = new AtomicBoolean(false)
  private val deferredIdleFlushTask: Runnable = () => {
    // Cleared before the scan: a subpartition marked after the scan started schedules a new task.
    deferredIdleFlushScheduled.set(false)
    var i = 0
    while (i < numSubpartitions) {
      // Only for a reader still idle: a busy one has a flush request or full buffers to take, and
      // flushing it would send partly filled buffers under load.
      if (deferredIdleFlush.get(i) == 1 && deferredIdleFlush.getAndSet(i, 0) == 1 && subpartitions(i).isDrained) {
        subpartitions(i).flush()
      }
      i += 1
    }
  }

  /**
   * A record: flushed at once when its reader has taken everything readable and the last such
   * flush was at least the idle-flush interval ago. An idle reader (or an idle network with credit
   * to spare) need not wait for the buffer timeout; a busy one leaves data queued, so under load
   * buffers fill as usual. A record inside the interval is flushed when the interval ends (by the
   * output flusher's thread), so the interval, not the buffer timeout, bounds its wait: sources
   * hand records over in bursts (a Real-Time Mode reader polling its source), and the second
   * record of a burst used to wait for the next buffer-timeout tick. One volatile read per record
   * otherwise.
   */
  override protected def onRecordWritten(subpartition: Int): Unit = flushForIdleReader(subpartition, spaced = true)

  /**
   * A latency marker measures the network stack, so it must not sit behind the idle-flush
   * interval: it is flushed at once when the reader is idle. Markers come once per tracking
   * interval, so this adds at most one flush per interval.
   */
  override protected def onLatencyMarkerWritten(subpartition: Int): Unit = flushForIdleReader(subpartition, spaced = false)

  private def flushForIdleReader(subpartition: Int, spaced: Boolean): Unit = {
    if (idleFlushNanos < 0 || !subpartitions(subpartition).isDrained) return
    if (spaced) {
      val now = System.nanoTime()
      // Without deferring (no flusher, or a buffer timeout <= the interval) nothing is ever marked:
      // no volatile read per record for it.
      if (deferring) {
        if (deferredIdleFlush.get(subpartition) == 1) {
          // A deferred flush still to come covers this record.
          if (now < deferredIdleFlushNanos(subpartition)) return
        } else if (deferredIdleFlushNanos(subpartition) > lastIdleFlushNanos(subpartition)) {
          // The deferred flush came (or found the reader busy): it was this interval's idle flush, so
          // a stream that goes on is still flushed once per interval, not once more right after it.
          // (The partition's one task may have come before this subpartition's own deadline.)
          lastIdleFlushNanos(subpartition) = math.min(deferredIdleFlushNanos(subpartition), now)
        }
      }
      val since = now - lastIdleFlushNanos(subpartition)
      if (since < idleFlushNanos) {
        if (deferring) deferIdleFlush(subpartition, now + idleFlushNanos - since)
        return
      }
      lastIdleFlushNanos(subpartition) = now
    }
    subpartitions(subpartition).flush()
  }

  private def deferIdleFlush(subpartition: Int, atNanos: Long): Unit = {
    deferredIdleFlushNanos(subpartition) = atNanos
    deferredIdleFlush.set(subpartition, 1)
    if (deferredIdleFlushScheduled.compareAndSet(false, true) &&
      !flusher.get.once(atNanos - System.nanoTime(), deferredIdleFlushTask)) {
      deferredIdleFlushScheduled.set(false) // the flusher stopped (the executor is shutting down)
    }
  }

  private val unconsumed = new CountDownLatch(numSubpartitions)

  override protected def requestBufferBuilder(subpartition: Int): BufferBuilder = {
    val fast = if (subpartitions(subpartition).queueLength < maxBuffersPerSubpartition) bufferPool.requestBuffer() else null
    val buffer =
      if (fast != null || bufferPool.isDestroyed) fast
      else whileBackPressured {
        subpartitions(subpartition).awaitRoom(maxBuffersPerSubpartition, System.nanoTime() + bufferRequestTimeoutMs * 1000000L)
        if (isReleased) throw new ProducerFailedException(partitionId, failureCause)
        bufferPool.requestBufferBlocking(bufferRequestTimeoutMs, PipelinedSubpartition.wakeUpBatch(bufferPool.numBuffers))
      }
    // A released partition destroys its pool: whichever request meets the destroyed pool (the fast
    // one included, when release woke the producer in the middle of a record) gets null and reports
    // the release. isDestroyed after the fast null cannot mistake a live pool (destruction is final);
    // a pool destroyed just after it answers the blocking request with null instead.
    if (buffer == null) throw poolDestroyed()
    new BufferBuilder(buffer)
  }

  override protected def addToSubpartition(subpartition: Int, consumer: BufferConsumer): Unit =
    subpartitions(subpartition).add(consumer)

  override protected def onBufferFinished(subpartition: Int): Unit = subpartitions(subpartition).onBufferFinished()

  override protected def flushSubpartition(subpartition: Int): Unit = subpartitions(subpartition).flush()

  override protected def onFinish(): Unit = subpartitions.foreach(_.finish())

  override protected def onRelease(cause: Throwable): Unit = {
    subpartitions.foreach(_.release())
    while (unconsumed.getCount > 0) unconsumed.countDown()
    onReleased(this)
  }

  override def createSubpartitionView(start: Int, end: Int, listener: BufferAvailabilityListener): ResultSubpartitionView = {
    if (end != start + 1) {
      throw new IllegalArgumentException(s"$this serves one subpartition per reader, not [$start, $end)")
    }
    if (start < 0 || start >= numSubpartitions) {
      throw new IndexOutOfBoundsException(s"$this has no subpartition $start")
    }
    subpartitions(start).createView(listener)
  }

  private[partition] def onSubpartitionConsumed(index: Int): Unit = {
    unconsumed.countDown()
    if (unconsumed.getCount == 0 && !isReleased) release(null)
  }

  /**
   * Waits (producer thread, after [[finish]]) until every consumer read the end of its
   * subpartition; the partition has then released itself. Throws if a consumer went away first.
   */
  def awaitConsumed(timeoutMs: Long): Unit = {
    if (!unconsumed.await(timeoutMs, TimeUnit.MILLISECONDS)) {
      val missing = subpartitions.filterNot(_.isConsumed).map(_.index)
      throw new TimeoutException(s"$this: consumers of subpartitions ${missing.mkString(", ")} did not read " +
        s"the end within ${timeoutMs}ms")
    }
    val cause = failureCause
    if (cause != null || subpartitions.exists(s => !s.isConsumed)) throw new ProducerFailedException(partitionId, cause)
  }

  override def numQueuedBuffers: Int = subpartitions.map(_.queueLength).sum

  def subpartition(i: Int): PipelinedSubpartition = subpartitions(i)
}
