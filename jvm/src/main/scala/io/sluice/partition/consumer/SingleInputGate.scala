package io.sluice.partition.consumer

import java.util.concurrent.TimeoutException

import io.netty.buffer.ByteBuf
import io.sluice.buffer.BlockCodec
import io.sluice.memory.{LocalBufferPool, MemorySegment, NetworkBufferPool}
import io.sluice.partition.PartitionedFileCipher

/**
 * The consumer's side of a shuffle read (Flink's SingleInputGate): its inputs (the map outputs, or
 * pipelined subpartitions, it reads) spread over [[InputChannel]]s (one per producing executor for
 * finished map outputs, one per input for pipelined ones), the gate's pool of floating buffers
 * shared by its remote channels, and a queue of channels that have data. [[getNext]] hands the
 * task thread a buffer from whichever channel has one, never waiting on any single channel, has
 * the [[InputBufferDecoder]] decrypt, verify and decompress it, counts every input's end (telling
 * the reader, which then drops that input's decode state), and answers null once every channel
 * has ended. What a channel throws is sorted by [[ChannelFailure]].
 *
 * Channels are requested lazily, on the first [[getNext]]: a gate that is never read (the second
 * input of a sort-merge join, until the first is read) costs no request and no exclusive buffer.
 * Its [[ChannelRequestWindow]] then requests them, at most `maxChannelsInFlight` in flight for a
 * regular (blocking) gate, every one at once for a pipelined gate ([[SingleInputGate.AllAtOnce]]).
 * Its counters and gauges are its [[InputGateMetrics]].
 *
 * Channels notify the gate from Netty or producer threads ([[notifyChannelNonEmpty]]); [[close]]
 * may come from any thread; everything else belongs to the task thread.
 *
 * @param floatingBuffers     the gate's LocalBufferPool (floating buffers of remote channels)
 * @param codec               decompresses buffers stored compressed (spark.shuffle.compress)
 * @param maxChannelsInFlight spark.sluice.network.maxChannelsInFlightPerGate, or AllAtOnce
 * @param fileCipher          decrypts spilled buffers of encrypted partition files (spark.io.encryption.enabled)
 * @param initialFloatingCredit floating buffers in a remote channel's first and smallest credit window
 *                            (spark.sluice.network.floatingBuffersPerGate, or a regular gate's share of its pool
 *                            per channel in flight when larger; default: the whole pool), which may grow ([[CreditWindow]])
 */
final class SingleInputGate(
    val owner: String,
    val networkBufferPool: NetworkBufferPool,
    val floatingBuffers: LocalBufferPool,
    codec: Option[BlockCodec],
    requestTimeoutMs: Long,
    bufferRequestTimeoutMs: Long,
    val maxChannelsInFlight: Int = SingleInputGate.AllAtOnce,
    fileCipher: Option[PartitionedFileCipher] = None,
    val initialFloatingCredit: Int = Int.MaxValue) {

  @volatile private var channels: Array[InputChannel] = Array.empty
  private val channelsWithData = new java.util.ArrayDeque[InputChannel]()
  private var queued: Array[Boolean] = Array.empty
  private var ended: Array[Boolean] = Array.empty
  private var numEnded = 0

  /** Per input: its end was read. Per channel: how many of its inputs ended. Task thread. */
  private var inputEnded: Array[Boolean] = Array.empty
  private var inputsEndedOf: Array[Int] = Array.empty
  private var inputEndListener: java.util.function.IntConsumer = _
  private var needsReadBuffer = false
  private var started = false
  @volatile private var closed = false

  val metrics = new InputGateMetrics(() => channels)
  private val window = new ChannelRequestWindow(owner, networkBufferPool, bufferRequestTimeoutMs, maxChannelsInFlight, metrics)
  private val decoder = new InputBufferDecoder(codec, fileCipher)
  private val scratch = new GateScratchBuffers(owner, networkBufferPool, bufferRequestTimeoutMs, decoder)

  // Flink's input metrics of this consumer (see InputGateMetrics).
  val numBytesIn = metrics.numBytesIn
  val numBytesInLocal = metrics.numBytesInLocal
  val numBytesInRemote = metrics.numBytesInRemote
  val numBuffersInLocal = metrics.numBuffersInLocal
  val numBuffersInRemote = metrics.numBuffersInRemote
  val idleTimeNanos = metrics.idleTimeNanos
  private var numChannelNotifications = 0L // guarded by channelsWithData

  /**
   * The gate's channels, before the first [[getNext]]. `needsReadBuffer`: some local channel
   * reads a spilled partition (the gate takes a scratch segment to read it into).
   */
  def setChannels(cs: Array[InputChannel], needsReadBuffer: Boolean = false): Unit = {
    require(!started, "channels are set before the gate is read")
    channels = cs
    window.setChannels(cs)
    queued = new Array[Boolean](cs.length)
    ended = new Array[Boolean](cs.length)
    inputEnded = new Array[Boolean](cs.iterator.map(_.inputs.iterator.map(_.index + 1).max).maxOption.getOrElse(0))
    inputsEndedOf = new Array[Int](cs.length)
    this.needsReadBuffer = needsReadBuffer
  }

  /**
   * Told each input's end, once, on the task thread inside [[getNext]], after every buffer of the
   * input was handed out; what it throws leaves [[getNext]] (the reader's error for an input cut
   * inside a record).
   */
  def setInputEndListener(listener: java.util.function.IntConsumer): Unit = inputEndListener = listener

  def numberOfChannels: Int = channels.length

  /** Inputs of the gate (map outputs or pipelined subpartitions) over all its channels. */
  def numberOfInputs: Int = inputEnded.length

  def channel(i: Int): InputChannel = channels(i)

  /** Channels requested and not ended yet; never more than [[maxChannelsInFlight]]. */
  def numChannelsInFlight: Int = window.numInFlight

  /** The most channels this gate ever had in flight at once. */
  def peakChannelsInFlight: Int = window.peak

  /** Channels requested so far (ended ones included). */
  def numChannelsRequested: Int = window.numRequested

  /** Partition requests the gate sent: one per remote channel requested. */
  def numPartitionRequests: Long = window.requested.count(_.isRemote).toLong

  /** Control messages of the gate's remote channels: requests, EndOfPartition frames, AddCredits. */
  def numControlMessages: Long = window.requested.collect { case r: RemoteInputChannel => r.numControlMessages }.sum

  /** Exclusive segments the gate holds: owned by its channels, or idle for its next ones. */
  def numExclusiveSegmentsHeld: Int = window.numExclusiveSegmentsHeld

  /** Scratch segments the gate holds (at most two: see [[GateScratchBuffers]]). */
  def numScratchSegmentsHeld: Int = scratch.numHeld

  /** Network segments the gate holds besides its (at most two) scratch ones: exclusive and floating. */
  def numNetworkSegmentsHeld: Int = window.numExclusiveSegmentsHeld + floatingBuffers.numRequestedSegments

  // ---- requesting channels (task thread) --------------------------------------------------------

  /**
   * Requests the first channels now rather than at the first [[getNext]] (as Flink's task does on
   * set-up; tests use it to have a gate that requested but does not read). Task thread.
   */
  def requestPartitions(): Unit = {
    if (closed) throw closedError()
    if (!started) start()
  }

  /** Takes the scratch and first exclusive buffers and requests the first channels ([[ChannelRequestWindow.start]]). */
  private def start(): Unit = {
    started = true
    if (closed || !window.start(scratch, needsReadBuffer)) throw closedError()
  }

  /** Exclusive segments of a remote channel that no longer needs them (any thread). */
  private[consumer] def recycleExclusiveSegments(segments: java.util.Collection[MemorySegment]): Unit =
    window.recycleExclusiveSegments(segments)

  /** `n` exclusive segments for a channel requested outside the gate's window (tests), waiting for them. */
  private[consumer] def awaitExclusiveSegments(n: Int): java.util.List[MemorySegment] = window.awaitExclusiveSegments(n)

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
        catch { case e: Throwable => throw ChannelFailure.of(owner, channel, e) }
      if (next != null) {
        if (next.moreAvailable) notifyChannelNonEmpty(channel)
        if (next.isEndOfPartition) {
          if (next.input >= 0 && next.input < inputEnded.length && !inputEnded(next.input)) {
            inputEnded(next.input) = true
            inputsEndedOf(channel.channelIndex) += 1
            if (inputEndListener != null) inputEndListener.accept(next.input)
          }
          if (inputsEndedOf(channel.channelIndex) == channel.inputs.size) {
            endChannel(channel)
            window.requestMore()
          }
        } else {
          return prepare(channel, next)
        }
      }
    }
    null
  }

  /** The next queued channel that has not ended, or null once every channel ended. */
  private def waitForChannelWithData(): InputChannel = {
    val ready = channelsWithData.synchronized(pollNotEnded())
    if (ready != null) return ready
    // Nothing to read right now: a good moment to request channels memory was short for before.
    if (window.hasRoom) window.requestMore()
    channelsWithData.synchronized(awaitChannelWithData())
  }

  /** Waits for a queued channel; the request timeout fails one of the channels waited for. Lock held. */
  private def awaitChannelWithData(): InputChannel = {
    val ready = pollNotEnded()
    if (ready != null) ready
    else metrics.whileWaitingForInput {
      val deadline = System.nanoTime() + requestTimeoutMs * 1000000L
      var c: InputChannel = null
      var allEnded = false
      while (c == null && !allEnded) {
        allEnded = numEnded == channels.length
        if (!allEnded) {
          if (closed) throw closedError()
          val left = deadline - System.nanoTime()
          if (left <= 0) throw requestTimedOut()
          channelsWithData.wait(math.max(1L, left / 1000000L))
          c = pollNotEnded()
        }
      }
      c
    }
  }

  /**
   * Nothing arrived for the request timeout: fails one of the channels waited for (a remote one
   * when there is one, its producer's executor being the likely culprit), so the Spark layer
   * reports a FetchFailed for that map output rather than retrying the task on the same outputs.
   * The message names the channels waited for. Lock held.
   */
  private def requestTimedOut(): InputChannelException = {
    val requested = window.numRequested
    val waiting = (0 until requested).filterNot(ended).map(channels(_))
    val culprit = waiting.find(_.isRemote).orElse(waiting.headOption).getOrElse(channels(requested))
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
    window.onChannelEnded()
    channel.releaseAllResources()
  }

  private def prepare(channel: InputChannel, next: BufferAndAvailability): InputBuffer = {
    val size = next.buffer.readableBytes()
    val data = decoder.decode(channel, next, previousNotReleased())
    metrics.countBuffer(channel.isRemote, size, data.readableBytes())
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
  private[consumer] def localReadBuffer(length: Int): ByteBuf = scratch.readBuffer(length, previousNotReleased())

  // ---- metrics (any thread, best effort; see InputGateMetrics) ---------------------------------

  def inputQueueLength: Int = metrics.inputQueueLength
  def idleTimeNanosNow: Long = metrics.idleTimeNanosNow
  def numExclusiveBuffers: Int = metrics.numExclusiveBuffers
  def numExclusiveBuffersUsed: Int = metrics.numExclusiveBuffersUsed
  def numFloatingBuffersAvailable: Int = metrics.numFloatingBuffersAvailable

  def isFinished: Boolean = channelsWithData.synchronized(numEnded == channels.length)

  /**
   * Releases every channel, the exclusive reserve, the floating pool and the scratch segments.
   * Idempotent; from any thread (a killed task's completion listener): a task waiting in
   * [[getNext]] for data wakes up and fails.
   */
  def close(): Unit = if (!closed) {
    closed = true
    scratch.close()
    channelsWithData.synchronized(channelsWithData.notifyAll())
    var error: Throwable = null
    channels.foreach { c =>
      try c.releaseAllResources()
      catch { case e: Throwable => if (error == null) error = e }
    }
    window.close()
    floatingBuffers.lazyDestroy()
    if (error != null) throw error
  }

  def isClosed: Boolean = closed

  override def toString: String =
    s"SingleInputGate($owner, ${channels.length} channels, $window, ended $numEnded)"
}

object SingleInputGate {

  /** A gate that requests every channel at once (pipelined shuffles). */
  val AllAtOnce: Int = Int.MaxValue

  /** How many channels a timeout's message names before it only counts the rest. */
  private val ChannelsNamedInErrors = 20
}
