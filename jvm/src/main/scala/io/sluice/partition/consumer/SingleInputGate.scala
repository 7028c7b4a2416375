package io.sluice.partition.consumer

import java.util.concurrent.TimeoutException
import java.util.concurrent.atomic.LongAdder

import io.netty.buffer.ByteBuf
import io.sluice.buffer.BlockCodec
import io.sluice.memory.{LocalBufferPool, MemorySegment, NetworkBuffer, NetworkBufferPool}
import io.sluice.partition.PartitionFileCipher

/**
 * The consumer's side of a shuffle read (Flink's SingleInputGate): its inputs (the map outputs, or
 * pipelined subpartitions, it reads) spread over [[InputChannel]]s (one per producing executor for
 * finished map outputs, one per input for pipelined ones), the gate's pool of floating buffers
 * shared by its remote channels, and a queue of channels that have data. [[getNext]] hands the
 * task thread a buffer from whichever channel has one, never waiting on any single channel, has
 * the [[InputBufferDecoder]] decrypt, verify and decompress it, counts every input's end, and
 * answers null once every channel has ended.
 *
 * Channels are requested lazily, on the first [[getNext]]: a gate that is never read (the second
 * input of a sort-merge join, until the first is read) costs no request and no exclusive buffer.
 * A regular (blocking) gate then keeps at most `maxChannelsInFlight` channels requested and not
 * yet ended, requesting the next as one ends, so its exclusive buffers are bounded whatever the
 * number of map outputs (Flink bounds a gate's required buffers likewise, FLINK-30473; Spark's
 * reader bounds its requests in flight). The exclusive segments come from the gate's
 * [[ExclusiveBufferReserve]]; the gate waits for the executor's memory only while no channel of
 * it is in flight, otherwise it takes segments only when they are free right now, so a gate never
 * waits while holding buffers others wait for. A pipelined gate ([[SingleInputGate.AllAtOnce]])
 * requests every channel at once.
 *
 * Channels notify the gate from Netty or producer threads ([[notifyChannelNonEmpty]]); [[close]]
 * may come from any thread; everything else belongs to the task thread.
 *
 * @param floatingBuffers     the gate's LocalBufferPool (floating buffers of remote channels)
 * @param codec               decompresses buffers stored compressed (spark.shuffle.compress)
 * @param maxChannelsInFlight spark.sluice.network.maxChannelsInFlightPerGate, or AllAtOnce
 * @param fileCipher          decrypts spilled buffers of encrypted partition files (spark.io.encryption.enabled)
 */
final class SingleInputGate(
    val owner: String,
    val networkBufferPool: NetworkBufferPool,
    val floatingBuffers: LocalBufferPool,
    codec: Option[BlockCodec],
    requestTimeoutMs: Long,
    bufferRequestTimeoutMs: Long,
    val maxChannelsInFlight: Int = SingleInputGate.AllAtOnce,
    fileCipher: Option[PartitionFileCipher] = None) {
  require(maxChannelsInFlight > 0, s"a gate needs at least one channel in flight, not $maxChannelsInFlight")

  @volatile private var channels: Array[InputChannel] = Array.empty
  private val channelsWithData = new java.util.ArrayDeque[InputChannel]()
  private var queued: Array[Boolean] = Array.empty
  private var ended: Array[Boolean] = Array.empty
  private var numEnded = 0

  /** Per input: its end was read. Per channel: how many of its inputs ended. Task thread. */
  private var inputEnded: Array[Boolean] = Array.empty
  private var inputsEndedOf: Array[Int] = Array.empty
  private var needsReadBuffer = false
  private var started = false

  /** Channels [0, nextToRequest) were requested; the rest wait for room in the window. */
  @volatile private var nextToRequest = 0

  /** Requested channels that have not ended (task thread writes; metrics read). */
  @volatile private var inFlight = 0
  @volatile private var peakInFlight = 0
  @volatile private var closed = false
  private val exclusive = new ExclusiveBufferReserve(networkBufferPool, owner, bufferRequestTimeoutMs)

  // Scratch buffers (unpooled segments, counted in the network memory): spilled local data is
  // read into one, compressed data decompressed into the other. Each is lent to one buffer at a time.
  private var scratchSegments: java.util.List[MemorySegment] = java.util.Collections.emptyList()
  private var readScratch: NetworkBuffer = _
  private val decoder = new InputBufferDecoder(codec, fileCipher)

  // Flink's input metrics of this consumer. numBytesIn counts the bytes of the buffers handed to the
  // task (decompressed: what the producers' numBytesOut counted), numBytesInLocal / numBytesInRemote
  // the bytes as they travelled from local / remote producers (compressed when stored compressed),
  // as Flink's gate and channel counters do. numBuffersInLocal counts the buffers local channels
  // handed over; numBuffersInRemote the frames remote channels received (one network buffer each,
  // which a packed frame fills with many map outputs' stored buffers).
  val numBytesIn = new LongAdder
  val numBytesInLocal = new LongAdder
  val numBytesInRemote = new LongAdder
  val numBuffersInLocal = new LongAdder
  val numBuffersInRemote = new LongAdder

  /** Nanoseconds the task waited in [[getNext]] with no buffer ready (idleTime). */
  val idleTimeNanos = new LongAdder

  /** When the task's current wait for input began (System.nanoTime), 0 when not waiting. */
  @volatile private var idleSince = 0L
  private var numChannelNotifications = 0L // guarded by channelsWithData

  /**
   * The gate's channels, before the first [[getNext]]. `needsReadBuffer`: some local channel
   * reads a spilled partition (the gate takes a scratch segment to read it into).
   */
  def setChannels(cs: Array[InputChannel], needsReadBuffer: Boolean = false): Unit = {
    require(!started, "channels are set before the gate is read")
    channels = cs
    queued = new Array[Boolean](cs.length)
    ended = new Array[Boolean](cs.length)
    inputEnded = new Array[Boolean](cs.iterator.map(_.inputs.iterator.map(_.index + 1).max).maxOption.getOrElse(0))
    inputsEndedOf = new Array[Int](cs.length)
    this.needsReadBuffer = needsReadBuffer
  }

  def numberOfChannels: Int = channels.length

  /** Inputs of the gate (map outputs or pipelined subpartitions) over all its channels. */
  def numberOfInputs: Int = inputEnded.length

  def channel(i: Int): InputChannel = channels(i)

  /** Channels requested and not ended yet; never more than [[maxChannelsInFlight]]. */
  def numChannelsInFlight: Int = inFlight

  /** The most channels this gate ever had in flight at once. */
  def peakChannelsInFlight: Int = peakInFlight

  /** Channels requested so far (ended ones included). */
  def numChannelsRequested: Int = nextToRequest

  /** Partition requests the gate sent: one per remote channel requested. */
  def numPartitionRequests: Long = requestedChannels.count(_.isRemote).toLong

  /** Control messages of the gate's remote channels: requests, EndOfPartition frames, AddCredits. */
  def numControlMessages: Long = requestedChannels.collect { case r: RemoteInputChannel => r.numControlMessages }.sum

  private def requestedChannels: Iterator[InputChannel] = channels.iterator.take(nextToRequest)

  /** Exclusive segments the gate holds: owned by its channels, or idle for its next ones. */
  def numExclusiveSegmentsHeld: Int = exclusive.numHeld

  // ---- requesting channels (task thread) --------------------------------------------------------

  /**
   * Requests the first channels now rather than at the first [[getNext]] (as Flink's task does on
   * set-up; tests use it to have a gate that requested but does not read). Task thread.
   */
  def requestPartitions(): Unit = {
    if (closed) throw closedError()
    if (!started) start()
  }

  /** Takes the scratch segments and requests the first channels (all of a pipelined gate). */
  private def start(): Unit = {
    started = true
    val n = (if (needsReadBuffer) 1 else 0) + (if (decoder.needsDecompressScratch) 1 else 0)
    if (n > 0) {
      val segments = networkBufferPool.requestUnpooledSegments(n, bufferRequestTimeoutMs, s"$owner (scratch buffers)")
      val open = exclusive.synchronized {
        if (!closed) {
          scratchSegments = segments
          var i = 0
          if (needsReadBuffer) { readScratch = new NetworkBuffer(segments.get(i), NoRecycle); i += 1 }
          if (decoder.needsDecompressScratch) decoder.decompressScratch = new NetworkBuffer(segments.get(i), NoRecycle)
        }
        !closed
      }
      if (!open) { networkBufferPool.recycleUnpooledSegments(segments); throw closedError() }
    }
    if (maxChannelsInFlight == SingleInputGate.AllAtOnce) {
      // Producers of a pipelined shuffle run now and wait for their readers: each subpartition
      // must be read while the others are, or its producer blocks on it while this gate waits for
      // a channel it has not requested yet (a deadlock). So every channel is requested at once,
      // with every exclusive buffer taken in one wait (all or nothing: two gates never each hold
      // a part of what both need).
      var need = 0L
      channels.foreach(c => need += exclusiveNeed(c))
      awaitIdle(exclusive.fill(need.min(Int.MaxValue).toInt))
    }
    requestMoreChannels()
  }

  /**
   * Requests pending channels while the window has room. The first channel of an empty window
   * may wait for its exclusive buffers (the gate reads nothing meanwhile, so it holds nothing
   * others wait for); further ones only take buffers that are free now, else wait for their turn.
   */
  private def requestMoreChannels(): Unit = {
    while (nextToRequest < channels.length && inFlight < maxChannelsInFlight) {
      val c = channels(nextToRequest)
      val need = exclusiveNeed(c)
      if (need == 0) c.requestSubpartitions()
      else {
        val segments =
          if (inFlight == 0) awaitIdle(exclusive.take(need, mayWait = true))
          else exclusive.take(need, mayWait = false)
        if (segments == null) return
        c.asInstanceOf[RemoteInputChannel].requestSubpartitions(segments)
      }
      nextToRequest += 1
      inFlight += 1
      if (inFlight > peakInFlight) peakInFlight = inFlight
    }
    if (nextToRequest == channels.length) exclusive.stopKeeping()
  }

  private def exclusiveNeed(c: InputChannel): Int = c match {
    case r: RemoteInputChannel => r.numExclusiveSegmentsNeeded
    case _ => 0
  }

  /** `body` is a wait for network memory: the task is idle meanwhile. */
  private def awaitIdle[T](body: => T): T = {
    val start = System.nanoTime()
    idleSince = start
    try body
    finally {
      idleTimeNanos.add(System.nanoTime() - start)
      idleSince = 0L
    }
  }

  /** Exclusive segments of a remote channel that no longer needs them (any thread). */
  private[consumer] def recycleExclusiveSegments(segments: java.util.Collection[MemorySegment]): Unit =
    exclusive.recycle(segments)

  /** `n` exclusive segments for a channel requested outside the gate's window (tests), waiting for them. */
  private[consumer] def awaitExclusiveSegments(n: Int): java.util.List[MemorySegment] = exclusive.take(n, mayWait = true)

  /** Called by a channel, from any thread, when it has data, an error or its end. */
  def notifyChannelNonEmpty(channel: InputChannel): Unit = channelsWithData.synchronized {
    val i = channel.channelIndex
    if (!queued(i) && !ended(i)) {
      queued(i) = true
      channelsWithData.add(channel)
      numChannelNotifications += 1
      channelsWithData.notifyAll()
    }
  }

  /** Times a channel was queued as having data ([[notifyChannelNonEmpty]] that woke the task, if it waited). */
  def numDataNotifications: Long = channelsWithData.synchronized(numChannelNotifications)

  /**
   * The next buffer ready for deserialisation, or null when every channel has ended. The caller
   * releases the returned buffer before calling again. The first call requests the channels.
   * Throws the error of a failed channel ([[InputChannelException]]; also when no channel
   * delivered anything for spark.sluice.network.requestTimeout), an InterruptedException when
   * the task thread is interrupted (the task is killed; [[close]] gives everything back), or a
   * TimeoutException when the executor's network memory stayed taken for the
   * spark.sluice.network.bufferRequestTimeout.
   */
  def getNext(): InputBuffer = {
    requestPartitions()
    while (true) {
      if (numEnded == channels.length) return null
      val channel = waitForChannelWithData()
      if (channel == null) return null
      val next =
        try channel.getNextBuffer()
        catch {
          case e: InputChannelException => throw interruptedOr(e)
          case e: Throwable => throw interruptedOr(new InputChannelException(channel, e))
        }
      if (next != null) {
        if (next.moreAvailable) notifyChannelNonEmpty(channel)
        if (next.isEndOfPartition) {
          if (next.input >= 0 && next.input < inputEnded.length && !inputEnded(next.input)) {
            inputEnded(next.input) = true
            inputsEndedOf(channel.channelIndex) += 1
          }
          if (inputsEndedOf(channel.channelIndex) == channel.inputs.size) {
            endChannel(channel)
            requestMoreChannels()
          }
        } else {
          return prepare(channel, next)
        }
      }
    }
    null
  }

  /**
   * An interrupt of the task thread (the task is killed) surfaces as an InterruptedException, not
   * as a channel failure: Spark must not report a FetchFailed, and so recompute a map output,
   * because it killed the reader.
   */
  private def interruptedOr(e: InputChannelException): Throwable = e.getCause match {
    case i: InterruptedException => i
    case c: java.nio.channels.ClosedByInterruptException =>
      val i = new InterruptedException(s"$owner was interrupted while reading ${e.channel.description}")
      i.initCause(c)
      i
    case _ => e
  }

  /** The next queued channel that has not ended, or null once every channel ended. */
  private def waitForChannelWithData(): InputChannel = {
    val ready = channelsWithData.synchronized(pollNotEnded())
    if (ready != null) return ready
    // Nothing to read right now: a good moment to request channels memory was short for before.
    if (nextToRequest < channels.length && inFlight < maxChannelsInFlight) requestMoreChannels()
    channelsWithData.synchronized(awaitChannelWithData())
  }

  /** Waits for a queued channel; the request timeout fails one of the channels waited for. Lock held. */
  private def awaitChannelWithData(): InputChannel = {
    var c = pollNotEnded()
    if (c == null) {
      val start = System.nanoTime()
      idleSince = start
      val deadline = start + requestTimeoutMs * 1000000L
      try {
        while (c == null) {
          if (numEnded == channels.length) return null
          if (closed) throw closedError()
          val left = deadline - System.nanoTime()
          if (left <= 0) throw requestTimedOut()
          channelsWithData.wait(math.max(1L, left / 1000000L))
          c = pollNotEnded()
        }
      } finally {
        idleTimeNanos.add(System.nanoTime() - start)
        idleSince = 0L
      }
    }
    c
  }

  /**
   * Nothing arrived for the request timeout: fails one of the channels waited for (a remote one
   * when there is one, its producer's executor being the likely culprit), so the Spark layer
   * reports a FetchFailed for that map output rather than retrying the task on the same outputs.
   * The message names the channels waited for. Lock held.
   */
  private def requestTimedOut(): InputChannelException = {
    val waiting = (0 until nextToRequest).filterNot(ended).map(channels(_))
    val culprit = waiting.find(_.isRemote).orElse(waiting.headOption).getOrElse(channels(nextToRequest))
    val shown = waiting.take(SingleInputGate.ChannelsNamedInErrors).map(_.description)
    val more = if (waiting.size > shown.size) s" and ${waiting.size - shown.size} more" else ""
    new InputChannelException(culprit,
      new TimeoutException(s"$owner received nothing for ${requestTimeoutMs}ms " +
        s"(spark.sluice.network.requestTimeout) from ${shown.mkString("; ")}$more"))
  }

  private def closedError() = new IllegalStateException(s"$owner: the input gate is closed")

  /**
   * Takes the next queued channel that has not ended off the queue. A channel can be queued again
   * while its end is being read (a pipelined partition releases itself when its last reader
   * reaches the end, which notifies every reader; a late error), or notified between handing out
   * its end and [[endChannel]]; once ended it has nothing more to give. Lock held.
   */
  private def pollNotEnded(): InputChannel = {
    var c = channelsWithData.poll()
    while (c != null && ended(c.channelIndex)) {
      queued(c.channelIndex) = false
      c = channelsWithData.poll()
    }
    if (c != null) queued(c.channelIndex) = false
    c
  }

  /** The channel read its end: its exclusive buffers go back to the reserve for the next channel. */
  private def endChannel(channel: InputChannel): Unit = {
    channelsWithData.synchronized {
      ended(channel.channelIndex) = true
      numEnded += 1
    }
    inFlight -= 1
    channel.releaseAllResources()
  }

  private def prepare(channel: InputChannel, next: BufferAndAvailability): InputBuffer = {
    val size = next.buffer.readableBytes()
    val data = decoder.decode(channel, next, previousNotReleased())
    if (channel.isRemote) numBytesInRemote.add(size.toLong) // numBuffersInRemote counts frames, as they arrive
    else { numBytesInLocal.add(size.toLong); numBuffersInLocal.increment() }
    numBytesIn.add(data.readableBytes().toLong)
    new InputBuffer(data, next.input, channel.channelIndex, next.subpartition, channel.isRemote, size)
  }

  /** Whether input `i`'s end was read (task thread; tests and error reports). */
  def hasInputEnded(i: Int): Boolean = inputEnded(i)

  /**
   * The input a channel failure concerns: the one the exception names, else the first input of
   * its channel whose end was not read (any of them may be incomplete), else the channel's first.
   */
  def inputToBlame(e: InputChannelException): Int =
    if (e.input >= 0) e.input
    else e.channel.inputs.find(in => in.index < inputEnded.length && !inputEnded(in.index)).getOrElse(e.channel.inputs.head).index

  private def previousNotReleased(): Exception =
    if (closed) closedError() else new IllegalStateException("the previous buffer was not released")

  /** The scratch buffer a local channel reads a spilled buffer of `length` bytes into. */
  private[consumer] def localReadBuffer(length: Int): ByteBuf = {
    if (readScratch == null) throw new IllegalStateException(s"$owner has no read buffer for spilled local data")
    if (readScratch.refCnt() != 1) throw previousNotReleased()
    if (length > readScratch.capacity()) {
      throw new CorruptBufferException(s"A spilled buffer of $length bytes does not fit a ${readScratch.capacity()}-byte segment")
    }
    readScratch.retainedSlice(0, length).clear()
  }

  /** Buffers waiting in remote channels (inputQueueLength). */
  def inputQueueLength: Int = sumChannels(_.numQueuedBuffers)

  // ---- metrics (any thread, best effort) -----------------------------------------------------

  /** Idle nanoseconds so far, including a wait for input that has not ended yet. */
  def idleTimeNanosNow: Long = {
    val since = idleSince
    val done = idleTimeNanos.sum()
    if (since == 0L) done else done + math.max(0L, System.nanoTime() - since)
  }

  /** Exclusive buffers of the gate's remote channels (0 while every channel is local). */
  def numExclusiveBuffers: Int = sumChannels(_.numExclusiveBuffers)

  def numExclusiveBuffersUsed: Int = sumChannels(_.numExclusiveBuffersUsed)

  /** Floating buffers the channels took from the pool but have not filled (not "used" yet). */
  def numFloatingBuffersAvailable: Int = sumChannels(_.numFloatingBuffersAvailable)

  private def sumChannels(f: InputChannel => Int): Int = {
    val cs = channels
    var s = 0
    var i = 0
    while (i < cs.length) { s += f(cs(i)); i += 1 }
    s
  }

  def isFinished: Boolean = channelsWithData.synchronized(numEnded == channels.length)

  /**
   * Releases every channel, the exclusive reserve, the floating pool and the scratch segments.
   * Idempotent; from any thread (a killed task's completion listener): a task waiting in
   * [[getNext]] for data wakes up and fails.
   */
  def close(): Unit = if (!closed) {
    val (scratch, scratchBuffers) = exclusive.synchronized {
      val s = scratchSegments
      // The gate's own references to its scratch buffers (a slice the task still holds keeps its own).
      val b = if (closed) Nil else Seq(readScratch, decoder.decompressScratch).filter(_ != null)
      closed = true
      scratchSegments = java.util.Collections.emptyList()
      (s, b)
    }
    scratchBuffers.foreach(_.release())
    channelsWithData.synchronized(channelsWithData.notifyAll())
    var error: Throwable = null
    channels.foreach { c =>
      try c.releaseAllResources()
      catch { case e: Throwable => if (error == null) error = e }
    }
    exclusive.close()
    floatingBuffers.lazyDestroy()
    networkBufferPool.recycleUnpooledSegments(scratch)
    if (error != null) throw error
  }

  def isClosed: Boolean = closed

  override def toString: String =
    s"SingleInputGate($owner, ${channels.length} channels, requested $nextToRequest, in flight $inFlight, ended $numEnded)"
}

object SingleInputGate {

  /** A gate that requests every channel at once (pipelined shuffles). */
  val AllAtOnce: Int = Int.MaxValue

  /** How many channels a timeout's message names before it only counts the rest. */
  private val ChannelsNamedInErrors = 20
}

/** Scratch segments stay with the gate; releasing their last slice must not recycle them. */
private object NoRecycle extends io.sluice.memory.BufferRecycler {
  override def recycle(segment: MemorySegment): Unit = ()
}
