package io.sluice.partition.consumer

import io.sluice.memory.{MemorySegment, NetworkBufferPool}

/**
 * Which channels of a [[SingleInputGate]] are requested, and when. Channels are requested in
 * order; a regular (blocking) gate keeps at most `maxChannelsInFlight` of them requested and not
 * yet ended, requesting the next as one ends, so its exclusive buffers are bounded whatever the
 * number of map outputs (Flink bounds a gate's required buffers likewise, FLINK-30473; Spark's
 * reader bounds its requests in flight). The exclusive segments come from the gate's
 * [[ExclusiveBufferReserve]]; the window waits for the executor's memory only while no channel of
 * the gate is in flight (its first wait, [[start]], takes the gate's scratch segments too),
 * otherwise it takes segments only when they are free right now, so a gate never waits while
 * holding buffers others wait for. A pipelined gate ([[SingleInputGate.AllAtOnce]]) requests
 * every channel at once.
 *
 * Requests belong to the gate's task thread; the counters are read by metrics from any thread and
 * segments are recycled from any thread.
 *
 * @param idle runs a wait for network memory, during which the task is idle (the gate's idle time)
 */
private[consumer] final class ChannelRequestWindow(
    owner: String,
    networkBufferPool: NetworkBufferPool,
    bufferRequestTimeoutMs: Long,
    val maxChannelsInFlight: Int,
    idle: InputGateMetrics) {
  require(maxChannelsInFlight > 0, s"a gate needs at least one channel in flight, not $maxChannelsInFlight")

  @volatile private var channels: Array[InputChannel] = Array.empty

  /** Channels [0, nextToRequest) were requested; the rest wait for room in the window. */
  @volatile private var nextToRequest = 0

  /** Requested channels that have not ended (task thread writes; metrics read). */
  @volatile private var inFlight = 0
  @volatile private var peakInFlight = 0
  private val exclusive = new ExclusiveBufferReserve(networkBufferPool, owner, bufferRequestTimeoutMs)

  def setChannels(cs: Array[InputChannel]): Unit = channels = cs

  /**
   * The gate's first read: takes the gate's scratch segments and the first channels' exclusive
   * ones ([[firstNeed]]) in one request, then requests the first channels (every channel of a
   * pipelined gate). One all-or-nothing wait: two gates starting at once on a nearly full pool
   * never each hold a part of what both need (scratch taken, waiting for exclusive buffers the
   * other holds) until the bufferRequestTimeout. False, holding nothing, when the gate closed
   * meanwhile.
   */
  def start(scratch: GateScratchBuffers, readBuffer: Boolean): Boolean = {
    val first = idle.whileIdle(scratch.take(readBuffer, firstNeed))
    if (first == null) return false
    exclusive.adopt(first)
    requestFirst()
    true
  }

  /** Requests the first channels (every channel of a pipelined gate). */
  private def requestFirst(): Unit = {
    if (maxChannelsInFlight == SingleInputGate.AllAtOnce) {
      // Producers of a pipelined shuffle run now and wait for their readers: each subpartition
      // must be read while the others are, or its producer blocks on it while this gate waits for
      // a channel it has not requested yet (a deadlock). So every channel is requested at once,
      // with every exclusive buffer taken in one wait (all or nothing: two gates never each hold
      // a part of what both need).
      idle.whileIdle(exclusive.fill(firstNeed - exclusive.numIdle))
    }
    requestMore()
  }

  /**
   * The exclusive segments the gate's first request takes: every channel's for a pipelined gate,
   * else the first channel's (the one an empty window waits for).
   */
  private def firstNeed: Int =
    if (maxChannelsInFlight == SingleInputGate.AllAtOnce) {
      var need = 0L
      channels.foreach(c => need += exclusiveNeed(c))
      need.min(Int.MaxValue).toInt
    } else channels.headOption.fold(0)(exclusiveNeed)

  /** Whether a channel waits to be requested and the window has room for it. */
  def hasRoom: Boolean = nextToRequest < channels.length && inFlight < maxChannelsInFlight

  /**
   * Requests pending channels while the window has room. The first channel of an empty window
   * may wait for its exclusive buffers (the gate reads nothing meanwhile, so it holds nothing
   * others wait for); further ones only take buffers that are free now, else wait for their turn.
   */
  def requestMore(): Unit = {
    while (nextToRequest < channels.length && inFlight < maxChannelsInFlight) {
      val c = channels(nextToRequest)
      val need = exclusiveNeed(c)
      if (need == 0) c.requestSubpartitions()
      else {
        val segments =
          if (inFlight == 0) idle.whileIdle(exclusive.take(need, mayWait = true))
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

  /** A requested channel read its end (task thread): it leaves the window. */
  def onChannelEnded(): Unit = inFlight -= 1

  /** Channels requested and not ended yet. */
  def numInFlight: Int = inFlight

  def peak: Int = peakInFlight

  /** Channels requested so far (ended ones included): they are the first this many. */
  def numRequested: Int = nextToRequest

  def requested: Iterator[InputChannel] = channels.iterator.take(nextToRequest)

  /** Exclusive segments the gate holds: owned by its channels, or idle for its next ones. */
  def numExclusiveSegmentsHeld: Int = exclusive.numHeld

  /** Exclusive segments of a remote channel that no longer needs them (any thread). */
  def recycleExclusiveSegments(segments: java.util.Collection[MemorySegment]): Unit = exclusive.recycle(segments)

  /** `n` exclusive segments for a channel requested outside the window (tests), waiting for them. */
  def awaitExclusiveSegments(n: Int): java.util.List[MemorySegment] = exclusive.take(n, mayWait = true)

  /** The gate closed: idle exclusive segments go back, and those of channels as they are released. */
  def close(): Unit = exclusive.close()

  override def toString: String = s"requested $nextToRequest, in flight $inFlight"
}
