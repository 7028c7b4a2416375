package io.sluice.netty

import java.io.IOException

import scala.collection.mutable.ArrayBuffer

import io.netty.buffer.ByteBuf
import io.sluice.partition._

/**
 * The server's end of a remote input channel that reads several finished partitions of this
 * executor at once (a [[MultiPartitionRequest]]): one [[UnionResultSubpartitionView]], one credit
 * and one sequence of [[PackedBufferResponse]]s. Each frame packs as many stored buffers (and
 * ends of inputs) as fit the receiver's buffer of `maxPayload` bytes and a frame of
 * `maxFrameLength`, at most [[PackedBufferResponse.MaxEntries]] entries, so a reducer reading
 * hundred-byte map outputs spends one credit, one frame and one wake-up per segment, not per
 * output (Flink's sort-merge reader packs small regions into full buffers the same way). Each frame
 * costs one credit; the backlog sent with it is the view's ([[UnionResultSubpartitionView.backlog]]).
 *
 * While it has credit, the reader has its next frame read on the `scheduler`'s read threads, one
 * read at a time: the thread opens the inputs' files, reads their stored buffers into a pooled
 * buffer as it takes them from the view (so each input's file is opened once, by its view) and
 * hands the finished frame to the event loop, which only writes it. Credit, the finished frame and
 * the state below belong to the connection's event loop; the view and the carried buffer to the
 * read in flight.
 */
private[netty] final class CreditBasedUnionViewReader(
    request: MultiPartitionRequest,
    maxPayload: Int,
    maxFrameLength: Int,
    queue: PartitionRequestQueue,
    scheduler: PartitionReadScheduler) extends NetworkSequenceViewReader with BufferAvailabilityListener {

  import CreditBasedUnionViewReader.ReadFrame

  override val receiverId: InputChannelID = request.receiverId
  private val creditBased = request.creditBased
  private val numInputs = request.inputs.size
  private val firstInput = request.inputs.head.partitionId
  @volatile private var view: UnionResultSubpartitionView = _
  @volatile private var released = false
  private var credit = request.credit
  private var sequenceNumber = 0
  private var finished = false
  private var reading = false
  private var lastRead = false
  private var ready: ReadFrame = _
  private var failure: Throwable = _

  /** A stored buffer or end taken from the view that did not fit the previous frame, and its input (read thread). */
  private var carried: BufferAndBacklog = _
  private var carriedInput = -1

  /**
   * Checks every input of the request (PartitionNotFoundException for a missing one) and reads the
   * first frame. The request is not kept: the view holds its inputs compactly.
   */
  def open(manager: ResultPartitionManager, inputs: IndexedSeq[RequestedSubpartitions]): Unit = {
    val v = UnionResultSubpartitionView.open(manager,
      inputs.map(in => (in.partitionId, in.subpartitionStart, in.subpartitionEnd)), this, sharedFiles = true)
    view = v
    if (released) v.releaseAllResources() else scheduleRead()
  }

  override def notifyDataAvailable(): Unit = () // a finished partition always has data: credit drives the reads

  override def isAvailable: Boolean = !released && (ready != null || failure != null)

  override def addCredit(n: Int): Unit = {
    credit = if (credit > Int.MaxValue - n) Int.MaxValue else credit + n
    scheduleRead()
  }

  /** Submits the next frame's read when there is credit for it and none is read or waiting (event loop). */
  private def scheduleRead(): Unit =
    if (!released && !reading && !lastRead && ready == null && failure == null && view != null &&
      (!creditBased || credit > 0)) {
      reading = true
      if (!scheduler.submit(readTask)) {
        reading = false
        failure = new IOException("The Sluice server is shutting down")
      }
    }

  private val readTask: Runnable = () => {
    var frame: ReadFrame = null
    var error: Throwable = null
    try if (!released) frame = readFrame()
    catch { case e: Throwable => error = e }
    val f = frame
    val e = error
    if (!queue.runOnLoop(() => onRead(f, e)) && f != null) f.release()
  }

  /** A read ended (event loop): keep its frame or failure for the writer, or drop it when released. */
  private def onRead(frame: ReadFrame, error: Throwable): Unit = {
    reading = false
    if (released) { if (frame != null) frame.release() }
    else {
      if (error != null) failure = error
      else if (frame != null) ready = frame
      else lastRead = true // nothing was left to read
      queue.notifyReaderAvailable(this)
    }
  }

  /**
   * Takes the next frame's entries from the view and reads their stored bytes (read thread). An
   * entry that would overrun the receiver's buffer or the frame length waits for the next frame.
   */
  private def readFrame(): ReadFrame = {
    val v = view
    val entries = new ArrayBuffer[PackedEntry](16)
    var payload: ByteBuf = null
    var bytes = 0
    var frameBytes = NettyMessage.FrameHeaderLength + PackedBufferResponse.FixedLength
    var full = false
    try {
      while (!full && entries.size < PackedBufferResponse.MaxEntries) {
        val next = if (carried != null) carried else v.getNextBuffer()
        val input = if (carried != null) carriedInput else v.lastInput
        carried = null
        if (next == null) full = true
        else {
          val s = next.spilled
          if (s == null && !next.isEndOfPartition) {
            next.recycle()
            throw new IllegalStateException(s"$this was handed an in-memory buffer; only stored buffers are packed")
          }
          val entry = if (s == null) PackedEntry.end(input, next.subpartition) else PackedEntry.of(input, s, next.subpartition)
          val size = if (s == null) 0 else s.storedLength
          if (entries.nonEmpty && (bytes + size > maxPayload || frameBytes + entry.encodedLength + size > maxFrameLength)) {
            carried = next
            carriedInput = input
            full = true
          } else {
            if (s != null) {
              if (payload == null) payload = queue.alloc.directBuffer(math.max(size, maxPayload))
              payload.ensureWritable(size)
              try s.readInto(payload)
              catch { case e: IOException => throw new UnreadablePayloadException(receiverId, e, size.toLong) }
            }
            entries += entry
            bytes += size
            frameBytes += entry.encodedLength + size
          }
        }
      }
      if (entries.isEmpty) {
        if (v.isReleased) throw new ProducerFailedException(firstInput, null)
        null
      } else {
        val f = new ReadFrame(entries.toIndexedSeq, payload, bytes, v.backlog + (if (carried != null) 1 else 0),
          carried == null && v.isFinished)
        payload = null
        f
      }
    } finally if (payload != null) payload.release()
  }

  override def getNextMessage(counters: TransportCounters): NettyMessage = {
    if (released) return null
    val e = failure
    if (e != null) {
      failure = null
      e match {
        case u: UnreadablePayloadException =>
          counters.unreadablePayloads.increment()
          throw new IOException(s"Could not send $describe: ${u.getMessage}", u)
        case other => throw other
      }
    }
    val f = ready
    if (f == null) return null
    ready = null
    if (f.last) { finished = true; lastRead = true }
    if (creditBased) {
      credit -= 1
      if (credit < 0) counters.negativeCredits.increment()
    }
    val m = PackedBufferResponse(receiverId, sequenceNumber, f.backlog, f.entries, f.bytes)(f.payload)
    sequenceNumber += 1
    scheduleRead()
    m
  }

  override def isFinished: Boolean = finished

  override def release(manager: ResultPartitionManager): Unit = if (!released) {
    released = true
    if (ready != null) { ready.release(); ready = null }
    val v = view
    if (v != null) v.releaseAllResources()
  }

  override def isReleased: Boolean = released

  /** A read submitted or running for this reader (tests). */
  private[netty] def isReading: Boolean = reading

  override def describe: String = s"$numInputs partitions ($firstInput${if (numInputs > 1) ", ..." else ""})"

  override def toString: String = s"reader $receiverId (${describe}, credit $credit)"
}

private[netty] object CreditBasedUnionViewReader {

  /** A frame read, waiting for the event loop: its entries, its payload (null: ends only) and what follows it. */
  final class ReadFrame(val entries: IndexedSeq[PackedEntry], val payload: ByteBuf, val bytes: Int, val backlog: Int,
      val last: Boolean) {
    def release(): Unit = if (payload != null) payload.release()
  }
}
