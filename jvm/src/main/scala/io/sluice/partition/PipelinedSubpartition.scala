package io.sluice.partition

import io.sluice.buffer.BufferConsumer

/**
 * The in-memory queue of one consumer channel of a pipelined partition (Flink's
 * PipelinedSubpartition): buffers are read while they are written, each exactly once.
 *
 * Only finished buffers are readable, plus the unfinished last one once it was flushed; reading
 * that one leaves it in the queue, and the next read continues where the last one stopped. The
 * backlog counts only readable buffers (FLINK-11082). Readers are told about data through the
 * view's listener on each rising edge of availability.
 *
 * Thread-safe: the producer (add, finish), the flusher (flush) and one reader (poll) synchronise
 * on this object. Listener calls happen outside the lock.
 */
final class PipelinedSubpartition(val index: Int, parent: PipelinedResultPartition) {

  private val buffers = new java.util.ArrayDeque[BufferConsumer]()
  private var flushRequested = false
  private var finished = false
  private var endDelivered = false
  private var released = false
  private var listener: BufferAvailabilityListener = _

  /** The producer waits in [[awaitRoom]] until the queue is down to this many buffers (-1: nobody waits). */
  private var roomLowWater = -1
  // The reader took everything readable at its last look (written by the reader under the lock,
  // read by the producer without it: a stale value only delays or advances one idle flush).
  @volatile private var drained = false

  // ---- producer side --------------------------------------------------------------------------

  def add(consumer: BufferConsumer): Unit = {
    val notify = synchronized {
      if (released || finished) {
        consumer.close()
        false
      } else {
        val before = isReadyLocked
        buffers.add(consumer)
        !before && isReadyLocked
      }
    }
    if (notify) notifyListener()
  }

  /**
   * The producer finished the last buffer in the queue. When it is the only one it is the first
   * finished buffer the reader can see (finished buffers ahead of it would have notified already),
   * so the reader is told, as in Flink. This holds even when a flush made part of it readable
   * before: a flush that runs between the producer finishing the buffer and this call sees it
   * finished, takes it as already announced and stays silent, so this call must not.
   */
  def onBufferFinished(): Unit = {
    val notify = synchronized(!released && buffers.size == 1 && isReadyLocked)
    if (notify) notifyListener()
  }

  def flush(): Unit = {
    val notify = synchronized {
      if (buffers.isEmpty || flushRequested || released) false
      else {
        val before = isReadyLocked
        flushRequested = buffers.size > 1 || buffers.peekLast().isDataAvailable
        !before && isReadyLocked
      }
    }
    if (notify) notifyListener()
  }

  /** No more buffers will come; readers see the end after the queued ones. */
  def finish(): Unit = {
    val notify = synchronized {
      if (finished || released) false
      else {
        val before = isReadyLocked
        finished = true
        !before && isReadyLocked
      }
    }
    if (notify) notifyListener()
  }

  /**
   * Waits until the queue holds fewer than `max` buffers, so one slow channel cannot take the
   * whole pool (Flink's max-buffers-per-channel). The wait is backpressure. A producer that had
   * to wait is woken only when the reader has taken a fifth of `max` (at least one buffer) off the
   * queue (a low-water mark), not on every buffer it takes: it then fills several buffers in one
   * go instead of being woken, and waking the reader, once per buffer, while a backpressured
   * producer still keeps at least four fifths of the queue taken (its outPoolUsage stays high, the
   * sign of backpressure). Every queued buffer is finished (the producer finished this
   * subpartition's last one before asking for a new one), so the reader can always take the
   * queue down that far.
   */
  def awaitRoom(max: Int, deadlineNanos: Long): Unit = synchronized {
    if (buffers.size >= max && !released) {
      val lowWater = PipelinedSubpartition.roomLowWater(max)
      try {
        while (buffers.size > lowWater && !released) {
          val left = deadlineNanos - System.nanoTime()
          if (left <= 0) {
            throw new java.util.concurrent.TimeoutException(s"Subpartition $index of ${parent.partitionId} kept " +
              s"more than $lowWater of its $max buffers (spark.sluice.network.maxBuffersPerSubpartition) for longer " +
              "than spark.sluice.network.bufferRequestTimeout; its consumer is not reading")
          }
          roomLowWater = lowWater
          wait(math.max(1L, left / 1000000L))
        }
      } finally roomLowWater = -1
    }
  }

  // ---- reader side ----------------------------------------------------------------------------

  def createView(l: BufferAvailabilityListener): ResultSubpartitionView = {
    val notify = synchronized {
      if (listener != null) throw new IllegalStateException(s"Subpartition $index of ${parent.partitionId} is " +
        "pipelined and already being read; it can be read only once")
      if (released) throw new ProducerFailedException(parent.partitionId, parent.failureCause)
      listener = l
      val ready = isReadyLocked
      drained = !ready
      ready
    }
    val view = new PipelinedSubpartitionView(this)
    if (notify) l.notifyDataAvailable()
    view
  }

  private[partition] def poll(): BufferAndBacklog = {
    var result: BufferAndBacklog = null
    var ended = false
    synchronized {
      var blocked = released
      while (result == null && !blocked && !buffers.isEmpty) {
        val consumer = buffers.peek()
        val last = buffers.size == 1
        val finishedBefore = consumer.isFinished
        if (last && !finishedBefore && !flushRequested) blocked = true
        else {
          val slice = consumer.build()
          if (finishedBefore) {
            buffers.poll()
            consumer.close()
            if (buffers.size <= roomLowWater) { roomLowWater = -1; notifyAll() }
          }
          if (last) flushRequested = false // drained everything readable
          if (slice.readableBytes() == 0) slice.release()
          else result = BufferAndBacklog.inMemory(slice, index, backlogLocked)
        }
      }
      drained = !hasReadableDataLocked // also clears a flush request the reader has now drained
      if (result == null && !released && finished && buffers.isEmpty && !endDelivered) {
        endDelivered = true
        ended = true
        result = BufferAndBacklog.endOfPartition(index)
      }
    }
    if (ended) parent.onSubpartitionConsumed(index)
    result
  }

  private[partition] def isAvailable(credits: Int): Boolean = synchronized {
    if (released) true
    else if (finished && buffers.isEmpty) !endDelivered
    else credits > 0 && hasReadableDataLocked
  }

  private[partition] def backlog: Int = synchronized(backlogLocked)

  /** Readable buffers: all but an unfinished, unflushed last one. */
  private def backlogLocked: Int = {
    val n = buffers.size
    if (n == 0) 0
    else {
      val last = buffers.peekLast()
      if (finished || last.isFinished || (flushRequested && last.isDataAvailable)) n else n - 1
    }
  }

  /**
   * Whether a reader would get data now. A flush request the reader has already drained (only an
   * unfinished buffer left, with nothing unread) is cleared here, so that the next flush is a
   * rising edge again and notifies the reader: the bytes committed after this check are only
   * announced by a flush, which the producer or the output flusher always issues after them.
   */
  private def hasReadableDataLocked: Boolean = {
    val n = buffers.size
    if (n > 1) true
    else if (n == 0) { flushRequested = false; false }
    else {
      val last = buffers.peek()
      if (last.isFinished) true
      else if (flushRequested && last.isDataAvailable) true
      else { flushRequested = false; false }
    }
  }

  /** What the reader's listener cares about: readable data, or the end still to deliver. */
  private def isReadyLocked: Boolean =
    listener != null && (hasReadableDataLocked || (finished && buffers.isEmpty && !endDelivered))

  private def notifyListener(): Unit = {
    val l = synchronized(listener)
    if (l != null) l.notifyDataAvailable()
  }

  // ---- release --------------------------------------------------------------------------------

  /** Drops every queued buffer; the reader (if any) is told so it can learn about the failure. */
  def release(): Unit = {
    val l = synchronized {
      if (released) null
      else {
        released = true
        while (!buffers.isEmpty) buffers.poll().close()
        notifyAll()
        listener
      }
    }
    if (l != null) l.notifyDataAvailable()
  }

  def isReleased: Boolean = synchronized(released)

  def isConsumed: Boolean = synchronized(endDelivered)

  /** Whether the reader has taken everything readable (then the next record need not wait). */
  def isDrained: Boolean = drained

  def queueLength: Int = synchronized(buffers.size)

  private[partition] def failureCauseOfParent: Throwable = parent.failureCause

  override def toString: String = synchronized(
    s"PipelinedSubpartition($index of ${parent.partitionId}, queued=${buffers.size}, backlog=$backlogLocked, " +
      s"flushRequested=$flushRequested, finished=$finished, released=$released)")
}

private[partition] object PipelinedSubpartition {

  /**
   * How many of `n` buffers must be free again before a waiting producer is woken, whether it
   * waits for room in its queue or for its pool: a fifth, at least one. It then fills several
   * buffers per wake-up, and its outPoolUsage stays at 0.8 or more (the sign of backpressure).
   */
  def wakeUpBatch(n: Int): Int = math.max(1, n / 5)

  /** Queue length at which a producer waiting for room in a queue of at most `max` buffers is woken. */
  def roomLowWater(max: Int): Int = max - wakeUpBatch(max)
}

/** The single reader's view of a [[PipelinedSubpartition]]. */
final class PipelinedSubpartitionView private[partition] (subpartition: PipelinedSubpartition)
  extends ResultSubpartitionView {

  override def getNextBuffer(): BufferAndBacklog = subpartition.poll()
  override def isAvailable(credits: Int): Boolean = subpartition.isAvailable(credits)
  override def backlog: Int = subpartition.backlog
  override def releaseAllResources(): Unit = subpartition.release()
  override def isReleased: Boolean = subpartition.isReleased
  override def failureCause: Throwable = subpartition.failureCauseOfParent
}
