package io.sluice.partition.consumer

import java.util.concurrent.atomic.AtomicLong

import scala.util.control.NonFatal

import io.sluice.memory.{BufferListener, MemorySegment, NetworkBuffer}
import io.sluice.netty._
import io.sluice.partition.ResultPartitionID

/**
 * An input channel whose producer runs in another executor (Flink's RemoteInputChannel): it
 * receives the producer's subpartitions over the executor pair's shared connection.
 *
 * A `packed` channel reads every finished map output the gate needs from that executor: one
 * MultiPartitionRequest names them all, and the server answers with PackedBufferResponses, each
 * holding many stored buffers and ends of inputs in one frame and one credit, which the channel
 * splits again on arrival (slices of the one receiving buffer, which goes back to its pool when the
 * last slice is released). Otherwise the channel reads one input with a PartitionRequest.
 *
 * Credit-based (the default): the channel's [[BufferManager]] owns `exclusiveBuffersPerChannel`
 * exclusive buffers, announced as the request's initial credit. Each buffer that arrives names the
 * sender's backlog; the manager then takes floating buffers from the gate's pool to cover it and
 * the channel announces as credit only the buffers it actually got. A channel of a gate that reads
 * with floating buffers only (`exclusiveBuffersPerChannel = 0`) starts with a floating buffer as
 * its credit instead, and keeps one while it has data to come (see [[BufferManager]]).
 *
 * Credit-less (`creditBased = false`): no exclusive buffers and no credit; the decoder takes a
 * buffer of the gate's pool for each arriving buffer and stalls the whole connection when there
 * is none (the pre-credit design of Flink 1.4, see "A Deep-Dive into Flink's Network Stack").
 *
 * Received buffers queue in its [[ReceivedBuffers]] (which checks a packed frame's entries against
 * the request) until the gate's task thread takes them; sequence numbers are checked. When the
 * channel is released, every buffer goes back where it came from: exclusive segments to the gate's
 * reserve, for its next channel (also those still held by the task, when it releases them),
 * floating buffers to the gate's pool.
 *
 * Thread-safety: the connection's event loop delivers buffers, ends and errors; the task thread
 * reads and releases; pools call back from recycling threads. The channel's monitor guards the
 * queue of received buffers and the sequence number, the manager's its buffers and credit (taken
 * inside the channel's, never the other way round); buffers are never released while holding either.
 */
final class RemoteInputChannel(
    gate: SingleInputGate,
    channelIndex: Int,
    inputs: IndexedSeq[ChannelInput],
    producer: ProducerLocation,
    connect: ProducerLocation => PartitionRequestClient,
    val creditBased: Boolean,
    exclusiveBuffersPerChannel: Int,
    waitForProducer: Boolean,
    bufferRequestTimeoutMs: Long,
    val packed: Boolean)
  extends InputChannel(gate, channelIndex, inputs, producer) {
  require(packed || inputs.size == 1, s"an unpacked channel reads one input, not ${inputs.size}")
  require(!(packed && waitForProducer), "pipelined partitions are not read packed")

  /** A channel of one input read with a PartitionRequest, whose index among the gate's inputs is the channel's. */
  def this(gate: SingleInputGate, channelIndex: Int, partitionId: ResultPartitionID, subpartitionStart: Int,
      subpartitionEnd: Int, producer: ProducerLocation, connect: ProducerLocation => PartitionRequestClient,
      creditBased: Boolean, exclusiveBuffersPerChannel: Int, waitForProducer: Boolean, bufferRequestTimeoutMs: Long) =
    this(gate, channelIndex, IndexedSeq(ChannelInput(channelIndex, partitionId, subpartitionStart, subpartitionEnd)),
      producer, connect, creditBased, exclusiveBuffersPerChannel, waitForProducer, bufferRequestTimeoutMs, packed = false)

  import ReceivedBuffers.Received

  /** This channel's name on the wire. */
  val id: InputChannelID = InputChannelID.random()

  private val received = new ReceivedBuffers(inputs, producer, () => description)
  private var expectedSequenceNumber = 0
  private var ended = false // the end of every input arrived
  @volatile private var released = false
  @volatile private var client: PartitionRequestClient = _
  private val endOfPartitionMessages = new AtomicLong
  private val buffers = new BufferManager(gate, creditBased, exclusiveBuffersPerChannel, () => description,
    () => announceCredit())

  override def isRemote: Boolean = true

  // ---- request -------------------------------------------------------------------------------

  /** Exclusive segments the channel takes when requested (its initial credit); 0 when credit-less or floating only. */
  def numExclusiveSegmentsNeeded: Int = if (creditBased) exclusiveBuffersPerChannel else 0

  /**
   * Requests the channel outside its gate's window (decoder tests): takes its exclusive buffers
   * through the gate, waiting for them, then as [[requestSubpartitions(segments)]].
   */
  override def requestSubpartitions(): Unit = requestSubpartitions(
    if (numExclusiveSegmentsNeeded > 0) gate.awaitExclusiveSegments(numExclusiveSegmentsNeeded)
    else java.util.Collections.emptyList())

  /** Credit-based without exclusive buffers: its credit comes from the gate's floating pool only. */
  private def floatingOnly: Boolean = creditBased && exclusiveBuffersPerChannel == 0

  /**
   * Takes `segments` as exclusive buffers (credit-based; the gate got them from its reserve),
   * opens or reuses the connection and sends the request. A connection that cannot be opened
   * fails the channel, not the call: the gate reports it with the channel's name. An interrupt
   * of the task thread while connecting is thrown (the task is being killed), and so is a fatal
   * error (an OutOfMemoryError fails the task, never the producer).
   */
  private[consumer] def requestSubpartitions(segments: java.util.List[MemorySegment]): Unit = {
    require(segments.size == numExclusiveSegmentsNeeded,
      s"$description takes $numExclusiveSegmentsNeeded exclusive segments, not ${segments.size}")
    val taken = synchronized(!released && buffers.takeExclusive(segments))
    if (!taken) { if (!segments.isEmpty) gate.recycleExclusiveSegments(segments); return }
    val c =
      try connect(producer)
      catch {
        case e: InterruptedException => throw e
        case NonFatal(e) if Thread.currentThread().isInterrupted =>
          val i = new InterruptedException(s"Interrupted while connecting to $producer for $description")
          i.initCause(e)
          throw i
        case NonFatal(e) =>
          setError(new RemoteTransportException(s"Could not connect to $producer: ${e.getMessage}", e))
          return
      }
    // Under the monitor: a release from another thread (the gate closing) either comes first, and
    // nothing is requested, or finds the client and sends its Cancel after the request. Credit
    // announced before the request is out is dropped (no client yet): announced after it.
    synchronized {
      if (released) return
      val initialCredit = if (floatingOnly) buffers.takeInitialFloating() else segments.size
      c.requestSubpartitions(this, initialCredit, creditBased, waitForProducer)
      client = c
    }
    if (floatingOnly && buffers.numUnannouncedCredit > 0) announceCredit()
  }

  // ---- from the connection (event loop) -----------------------------------------------------

  /**
   * A buffer for the payload of an arriving BufferResponse: a free one of this channel (credit-
   * based; none free means the sender exceeded its credit), or one of the gate's pool
   * (credit-less; null after registering `listener` when the pool is empty). Null when released,
   * or when the gate's pool was destroyed (the gate closed; `listener` is then not registered).
   */
  private[sluice] def requestBufferForData(listener: BufferListener): NetworkBuffer = {
    if (creditBased) { if (released) null else buffers.requestBuffer(producer) }
    else if (released) null
    else gate.floatingBuffers.requestBufferOrListen(listener)
  }

  /** Forgets a stalled decoder's wait for the gate's pool (its connection closed). */
  private[sluice] def removeBufferListener(listener: BufferListener): Unit = gate.floatingBuffers.removeListener(listener)

  /** A buffer arrived (its payload is in `r.data`, a buffer this channel handed out); the gate is told at once. */
  private[sluice] def onBuffer(r: BufferResponse): Unit = if (receiveBuffer(r)) notifyGate()

  /**
   * As [[onBuffer]], except that when the buffer made the channel non-empty, the gate is not told
   * here: this returns true and the caller calls [[notifyGate]] (the connection does so once at
   * the end of what one read from the socket brought, so that a consumer thread waiting for data
   * is woken once for several buffers, not once for each).
   */
  private[sluice] def receiveBuffer(r: BufferResponse): Boolean = {
    var error: Throwable = null
    var drop = false
    var wasEmpty = false
    var announce = false
    synchronized {
      if (released) drop = true
      else if (r.sequenceNumber != expectedSequenceNumber) {
        drop = true
        error = outOfSequence("buffer", r.sequenceNumber)
      } else {
        expectedSequenceNumber += 1
        val unread = received.numFrames
        wasEmpty = received.isEmpty
        received.add(new Received(inputs.head.index, r.data, r.subpartition, r.compressed, r.rawLength, r.hasChecksum,
            r.crc, r.iv, endsFrame = true))
        gate.numBuffersInRemote.increment()
        announce = buffers.onBufferReceived(r.backlog, unread)
      }
    }
    if (drop) r.releasePayload()
    if (error != null) setError(error)
    if (announce) announceCredit()
    error == null && wasEmpty
  }

  /**
   * A packed frame arrived (its payload in `r.data`, a buffer this channel handed out): its entries
   * queue as slices of that buffer and ends of inputs. As [[receiveBuffer]], returns whether the
   * channel became non-empty, for the caller to notify the gate.
   */
  private[sluice] def receivePacked(r: PackedBufferResponse): Boolean = {
    var error: Throwable = null
    var wasEmpty = false
    var announce = false
    synchronized {
      if (released) ()
      else if (r.sequenceNumber != expectedSequenceNumber) {
        error = outOfSequence("frame", r.sequenceNumber)
      } else {
        error = received.checkEntries(r)
        if (error == null) {
          expectedSequenceNumber += 1
          val unread = received.numFrames
          wasEmpty = received.isEmpty
          received.addPacked(r)
          if (received.allInputsEnded) ended = true
          gate.numBuffersInRemote.increment()
          announce = buffers.onBufferReceived(r.backlog, unread, ended)
        }
      }
    }
    // The slices hold the buffer now; this reference goes (with an empty or discarded frame, the buffer too).
    r.releasePayload()
    if (error != null) setError(error)
    if (announce) announceCredit()
    error == null && wasEmpty && !released
  }

  /** A message numbered `number` arrived where `expectedSequenceNumber` was due. Lock held. */
  private def outOfSequence(what: String, number: Int): TransportProtocolException =
    new TransportProtocolException(s"$description received $what number $number from $producer, expected number " +
      s"$expectedSequenceNumber (lost or reordered data)")

  /** Tells the gate this channel has data (after [[receiveBuffer]] returned true). */
  private[sluice] def notifyGate(): Unit = notifyChannelNonEmpty()

  private[sluice] def onEndOfPartition(sequenceNumber: Int, subpartition: Int): Unit = {
    val error = synchronized {
      if (released) null
      else if (sequenceNumber != expectedSequenceNumber) {
        outOfSequence("the end as message", sequenceNumber)
      } else {
        expectedSequenceNumber += 1
        endOfPartitionMessages.incrementAndGet()
        ended = true
        received.addEndOfAll(subpartition)
        null
      }
    }
    if (error != null) setError(error) else notifyChannelNonEmpty()
  }

  /** The server reported that this channel's request failed (`input`: the gate's input it concerns, or -1). */
  private[sluice] def onError(cause: Throwable, input: Int = -1): Unit = setError(cause, input)

  /** The connection failed or closed under this channel. */
  private[sluice] def onConnectionError(cause: Throwable): Unit = if (!released) {
    setError(new RemoteTransportException(s"Lost the connection to $producer while reading $partitionId: " +
          s"${cause.getClass.getSimpleName}: ${cause.getMessage}", cause))
  }

  // ---- credit ---------------------------------------------------------------------------------

  /**
   * Asks the connection to announce this channel's credit (the manager found it due); until the
   * announcement is written, more credit just accumulates.
   */
  private def announceCredit(): Unit = {
    val c = client
    if (c != null && !released) c.notifyCreditAvailable(this)
    else buffers.announcementDropped()
  }

  /** Credit not announced yet, now to be sent in an AddCredit (event loop). */
  private[sluice] def getAndResetUnannouncedCredit(): Int = buffers.getAndResetUnannouncedCredit()

  // ---- the task's side --------------------------------------------------------------------------

  override def getNextBuffer(): BufferAndAvailability = {
    checkError()
    val (next, more) = synchronized {
      val n = received.poll()
      (n, !received.isEmpty)
    }
    if (next == null) null
    else if (next.data == null) BufferAndAvailability.endOfPartition(next.input, next.subpartition, more)
    else new BufferAndAvailability(next.input, next.data, next.subpartition, next.compressed, next.rawLength,
      next.hasChecksum, next.crc, more, next.iv)
  }

  /** Receiving buffers holding data the task has not taken (a packed frame is one, whatever it packs). */
  override def numQueuedBuffers: Int = synchronized(received.numFrames)

  override def numExclusiveBuffers: Int = buffers.numExclusiveBuffers

  override def numExclusiveBuffersUsed: Int = buffers.numExclusiveBuffersUsed

  override def numFloatingBuffersAvailable: Int = buffers.numFloatingBuffersAvailable

  override def releaseAllResources(): Unit = {
    val (queued, sendCancel) = synchronized {
      if (released) return
      released = true
      (received.drain(), !ended)
    }
    buffers.release()
    queued.forEach(r => if (r.data != null && r.data.refCnt() > 0) r.data.release())
    val c = client
    if (c != null) c.cancelRequest(this, sendCancel)
  }

  def isReleased: Boolean = released

  // ---- observability ---------------------------------------------------------------------------

  /** Credit announced to the sender so far (the initial credit included). */
  def numCreditsAnnounced: Long = buffers.numCreditsAnnounced

  /** Buffers received so far; never more than [[numCreditsAnnounced]] when credit-based. */
  def numBuffersReceived: Long = buffers.numBuffersReceived

  /** Buffers that arrived while the sender had no credit left; must stay 0. */
  def numCreditOverruns: Long = buffers.numCreditOverruns

  /** Free buffers the channel holds for the sender: its credit, announced or not. */
  def numAvailableBuffers: Int = buffers.numAvailableBuffers

  /** The credit window ([[CreditWindow]]) in receiving buffers, and how often it grew. */
  def creditWindow: Int = buffers.creditWindow
  def numCreditWindowGrowths: Long = buffers.numCreditWindowGrowths

  /**
   * Control messages of this channel so far: its partition request (once requested), the
   * EndOfPartition frames and the AddCredit messages (a packed channel's ends travel inside its
   * data frames and count nothing here).
   */
  def numControlMessages: Long =
    (if (client != null) 1L else 0L) + endOfPartitionMessages.get + buffers.numCreditMessages

  override def toString: String = s"RemoteInputChannel($description, id $id)"
}
