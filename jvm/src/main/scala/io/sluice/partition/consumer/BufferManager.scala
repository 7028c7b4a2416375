package io.sluice.partition.consumer

import java.util.concurrent.atomic.AtomicLong

import io.sluice.memory.{BufferListener, BufferRecycler, MemorySegment, NetworkBuffer}
import io.sluice.netty.TransportProtocolException

/**
 * The buffers and credit of one [[RemoteInputChannel]] (Flink's BufferManager, FLINK-16012): its
 * exclusive buffers, which the gate hands it from its [[ExclusiveBufferReserve]] when the channel
 * is requested and which are announced as the request's initial credit; the floating buffers it
 * takes from the gate's pool to cover the sender's backlog (waiting as the pool's
 * [[BufferListener]] when it is empty); and the credit not announced yet. Every free buffer held
 * here is one credit the sender has, announced or about to be, so data can always be received
 * without waiting. An exclusive buffer the task releases comes back as new credit, or takes the
 * place of a floating one, which goes back to the gate's pool.
 *
 * A channel of a gate that reads with floating buffers only (`exclusiveBuffersPerChannel = 0`,
 * past spark.sluice.network.maxRequiredBuffersPerGate, as Flink past FLINK-30473's threshold) has
 * no exclusive buffer: its initial credit is a floating buffer ([[takeInitialFloating]]) and, while
 * it has data to come, it keeps at least one credit whatever the backlog says, so its sender is
 * never left without credit and every channel gets its turn at the gate's pool (its listeners are
 * served in order).
 *
 * Credit-less channels (`creditBased = false`) hold no buffer here; the manager only counts what
 * they receive.
 *
 * Thread-safety: its own monitor guards its state. The channel calls it while holding the channel's
 * monitor (lock order: channel, then manager); the manager never calls out while holding its own,
 * and buffers are released outside it. Pools and the task call back from their threads.
 *
 * @param announce asks the connection to announce the unannounced credit (called without locks)
 */
private[consumer] final class BufferManager(
    gate: SingleInputGate,
    creditBased: Boolean,
    exclusiveBuffersPerChannel: Int,
    describe: () => String,
    announce: () => Unit) extends BufferListener {

  private val availableExclusive = new java.util.ArrayDeque[NetworkBuffer]()
  private val availableFloating = new java.util.ArrayDeque[NetworkBuffer]()
  private var numRequiredBuffers = 0
  private var exclusiveHeld = 0 // exclusive segments owned (free here or lent out)
  private var unannouncedCredit = 0

  /** An announcement was requested and not yet taken by the connection. */
  private var announcementPending = false
  private val window = new CreditWindow(
    math.max(1, exclusiveBuffersPerChannel + math.min(gate.initialFloatingCredit, gate.floatingBuffers.maxNumberOfSegments)),
    math.max(1, exclusiveBuffersPerChannel + gate.floatingBuffers.maxNumberOfSegments))
  private var waitingForFloating = false
  private var released = false

  // Counters for tests and metrics (flow-control invariants).
  private val creditsAnnounced = new AtomicLong
  private val buffersReceived = new AtomicLong
  private val creditOverruns = new AtomicLong
  private val creditMessages = new AtomicLong

  private object exclusiveRecycler extends BufferRecycler {
    override def recycle(segment: MemorySegment): Unit = recycleExclusive(segment)
  }

  /**
   * Takes `segments` as the exclusive buffers, the sender's initial credit; false (nothing taken)
   * when the channel was released already.
   */
  def takeExclusive(segments: java.util.List[MemorySegment]): Boolean = {
    val taken = synchronized {
      if (!released) {
        segments.forEach(s => availableExclusive.add(new NetworkBuffer(s, exclusiveRecycler)))
        numRequiredBuffers = segments.size
        exclusiveHeld = segments.size
      }
      !released
    }
    if (taken) creditsAnnounced.set(segments.size.toLong)
    taken
  }

  /**
   * The initial credit of a channel without exclusive buffers: one floating buffer if the gate's
   * pool has one now, else none and the manager listens for one (announced when it comes, once
   * the request is out: see [[RemoteInputChannel]]). Counts what it returns as announced.
   */
  def takeInitialFloating(): Int = {
    val c = synchronized {
      if (released) 0
      else {
        numRequiredBuffers = 1
        requestFloatingLocked()
        val got = unannouncedCredit
        unannouncedCredit = 0
        got
      }
    }
    creditsAnnounced.set(c.toLong)
    c
  }

  /**
   * A free buffer for an arriving payload (credit-based): a floating one first. None free means
   * the sender exceeded its credit, a protocol error. Null when released.
   */
  def requestBuffer(producer: ProducerLocation): NetworkBuffer = synchronized {
    if (released) null
    else {
      var b = availableFloating.poll()
      if (b == null) b = availableExclusive.poll()
      if (b == null) {
        throw new TransportProtocolException(s"$producer sent a buffer for ${describe()} beyond its credit " +
          s"(${creditsAnnounced.get} announced, ${buffersReceived.get} received)")
      }
      b
    }
  }

  /**
   * A buffer arrived, the sender has `backlog` more, and `unread` buffers were waiting for the task
   * before it: get floating buffers until `backlog + exclusive` are free here, as far as the channel's
   * [[CreditWindow]] (which this arrival tunes) has room beside the unread ones, this one included,
   * or the pool is empty (then wait as its listener). A
   * backlog of 0 counts too: it lowers the requirement, so exclusive buffers coming back push
   * floating ones out again ([[recycleExclusive]]), as in Flink. Returns whether the caller should
   * announce credit now ([[announce]], outside every lock). `ended`: every input of the channel
   * has arrived, nothing more will (a channel without exclusive buffers then stops asking).
   */
  def onBufferReceived(backlog: Int, unread: Int, ended: Boolean = false): Boolean = {
    val n = buffersReceived.incrementAndGet()
    if (!creditBased) false
    else synchronized {
      if (n > creditsAnnounced.get) creditOverruns.incrementAndGet()
      window.onBufferReceived(backlog, unread, n)
      numRequiredBuffers = window.required(backlog, exclusiveBuffersPerChannel, unread + 1)
      // Without exclusive buffers a backlog of 0 (a lower bound for a packed channel) must not leave
      // the sender without credit while data may follow.
      if (exclusiveBuffersPerChannel == 0 && !ended && numRequiredBuffers == 0) numRequiredBuffers = 1
      requestFloatingLocked()
      shouldAnnounceLocked()
    }
  }

  /**
   * Whether to announce the unannounced credit now. Credit is batched: it is announced once it is
   * at least the credit the sender still holds (so the sender never runs dry while credit waits
   * here: at the latest when its credit reaches 0, anything unannounced goes out), which halves the
   * AddCredit messages (and the wake-ups of both event loops) of a busy channel or better. Sets the
   * pending flag it returns. Lock held.
   */
  private def shouldAnnounceLocked(): Boolean = {
    val senderCredit = creditsAnnounced.get - buffersReceived.get
    val now = !announcementPending && !released && unannouncedCredit > 0 && unannouncedCredit >= senderCredit
    if (now) announcementPending = true
    now
  }

  /**
   * Takes floating buffers until enough are free or the pool is empty (then listens), or the
   * pool is destroyed (the gate is closing: nothing more to wait for). Lock held.
   *
   * A null from the pool means either. Destruction is final and tells the listeners registered
   * before it ([[notifyBufferDestroyed]], which waits for this monitor, held here), so reading
   * [[LocalBufferPool.isDestroyed]] after the null cannot go wrong: true, nothing was registered or
   * the pool's notice follows; false, this manager is registered and hears of a later destruction.
   */
  private def requestFloatingLocked(): Unit = {
    val pool = gate.floatingBuffers
    var destroyed = false
    while (!waitingForFloating && !destroyed && !released && numAvailableLocked < numRequiredBuffers) {
      val b = pool.requestBufferOrListen(this)
      if (b != null) {
        availableFloating.add(b)
        unannouncedCredit += 1
      } else if (pool.isDestroyed) destroyed = true
      else waitingForFloating = true
    }
  }

  private def numAvailableLocked: Int = availableExclusive.size + availableFloating.size

  /** A floating buffer for this channel (the gate's pool, from a recycling thread). */
  override def notifyBufferAvailable(buffer: NetworkBuffer): Boolean = {
    var now = false
    val taken = synchronized {
      waitingForFloating = false
      if (released || numAvailableLocked >= numRequiredBuffers) false
      else {
        availableFloating.add(buffer)
        unannouncedCredit += 1
        requestFloatingLocked()
        now = shouldAnnounceLocked()
        true
      }
    }
    if (now) announce()
    taken
  }

  override def notifyBufferDestroyed(): Unit = synchronized { waitingForFloating = false }

  /** The task released an exclusive buffer: it becomes credit again, or takes a floating one's place. */
  private def recycleExclusive(segment: MemorySegment): Unit = {
    var toGlobal = false
    var floating: NetworkBuffer = null
    var now = false
    synchronized {
      if (released) toGlobal = true
      else {
        availableExclusive.add(new NetworkBuffer(segment, exclusiveRecycler))
        if (numAvailableLocked > numRequiredBuffers && !availableFloating.isEmpty) floating = availableFloating.poll()
        else { unannouncedCredit += 1; now = shouldAnnounceLocked() }
      }
    }
    if (toGlobal) gate.recycleExclusiveSegments(java.util.Collections.singletonList(segment))
    if (floating != null) floating.release()
    if (now) announce()
  }

  /** The announcement asked for will not be written (no connection, or the channel went away). */
  def announcementDropped(): Unit = synchronized { announcementPending = false }

  /** Credit not announced yet, now to be sent in an AddCredit (event loop). */
  def getAndResetUnannouncedCredit(): Int = synchronized {
    val c = unannouncedCredit
    unannouncedCredit = 0
    announcementPending = false
    creditsAnnounced.addAndGet(c.toLong)
    if (c > 0) creditMessages.incrementAndGet()
    c
  }

  /**
   * Gives every free buffer back (floating ones to the gate's pool, exclusive segments to the
   * gate's reserve through their recycler, also those the task still holds when it releases them)
   * and stops listening to the pool. Idempotent.
   */
  def release(): Unit = {
    val free = synchronized {
      if (released) return
      released = true
      exclusiveHeld = 0
      val f = new java.util.ArrayList[NetworkBuffer](availableExclusive)
      f.addAll(availableFloating)
      availableExclusive.clear()
      availableFloating.clear()
      f
    }
    gate.floatingBuffers.removeListener(this)
    free.forEach(b => b.release())
  }

  // ---- observability (any thread) -------------------------------------------------------------

  def numCreditsAnnounced: Long = creditsAnnounced.get
  def numBuffersReceived: Long = buffersReceived.get
  def numCreditOverruns: Long = creditOverruns.get
  def numCreditMessages: Long = creditMessages.get
  def numExclusiveBuffers: Int = synchronized(exclusiveHeld)
  def numExclusiveBuffersUsed: Int = synchronized(exclusiveHeld - availableExclusive.size)
  def numFloatingBuffersAvailable: Int = synchronized(availableFloating.size)
  def numAvailableBuffers: Int = synchronized(numAvailableLocked)
  def numUnannouncedCredit: Int = synchronized(unannouncedCredit)
  def creditWindow: Int = synchronized(window.current)
  def numCreditWindowGrowths: Long = synchronized(window.timesGrown)
}
