package io.sluice.netty

import java.io.IOException

import scala.collection.immutable.ArraySeq
import scala.collection.mutable.ArrayBuffer

import io.netty.buffer.ByteBuf
import io.sluice.partition._

/**
 * The server's end of a remote input channel that reads one or several finished partitions of this
 * executor (a [[MultiPartitionRequest]], or a [[PartitionRequest]] of a blocking partition): one
 * [[UnionResultSubpartitionView]], one credit and one sequence of [[PackedBufferResponse]]s. Each
 * frame packs as many stored buffers (and ends of inputs) as fit the receiver's buffer of
 * `maxPayload` bytes and a frame of `maxFrameLength`, at most [[PackedBufferResponse.MaxEntries]]
 * entries, and costs one credit; its backlog is the frames still to come.
 *
 * Frames are read on the `scheduler`'s read threads into its read buffers, as many ahead as the
 * credit allows and buffers are free, by one read at a time that starts where the last one ended, so
 * each input's file is opened once per reader; stored buffers that lie back to back in a file are
 * read in one call ([[SpilledBufferReads]]); the event loop only writes finished frames. Credit, the
 * frames read and the state below belong to the event loop; the view, the carried entry and the
 * reads to the read in flight.
 */
private[netty] final class CreditBasedUnionViewReader(
    request: MultiPartitionRequest,
    maxPayload: Int,
    maxFrameLength: Int,
    queue: PartitionRequestQueue,
    scheduler: PartitionReadScheduler) extends NetworkSequenceViewReader with BufferAvailabilityListener {

  import CreditBasedUnionViewReader.{MaxFramesPerRead, ReadFrame}

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
  private val ready = new java.util.ArrayDeque[ReadFrame]()
  private var failure: Throwable = _

  /** Where the next read starts (told by the read before it): its partition and file offset. */
  private var nextPartition: ResultPartitionID = firstInput
  private var nextOffset = 0L

  /** Frames the read in flight may read (set before it is submitted). */
  @volatile private var framesToRead = 0

  /** A stored buffer or end taken from the view that did not fit the previous frame, and its input (read thread). */
  private var carried: BufferAndBacklog = _
  private var carriedInput = -1

  /** The positional reads of the frame being read (read thread). */
  private val reads = new SpilledBufferReads

  /**
   * Checks every input of the request (PartitionNotFoundException for a missing one) and reads the
   * first frames. The request is not kept: the view holds its inputs compactly.
   */
  def open(manager: ResultPartitionManager, inputs: IndexedSeq[RequestedSubpartitions]): Unit = {
    val v = UnionResultSubpartitionView.open(manager,
      inputs.map(in => (in.partitionId, in.subpartitionStart, in.subpartitionEnd)), this, sharedFiles = true)
    view = v
    if (released) v.releaseAllResources() else scheduleRead()
  }

  override def notifyDataAvailable(): Unit = () // a finished partition always has data: credit drives the reads

  override def isAvailable: Boolean = !released && (!ready.isEmpty || failure != null)

  override def addCredit(n: Int): Unit = {
    credit = if (credit > Int.MaxValue - n) Int.MaxValue else credit + n
    scheduleRead()
  }

  /**
   * Submits the next read when the credit covers more frames than are read (credit-less: a few
   * ahead) and none is in flight (event loop).
   */
  private def scheduleRead(): Unit =
    if (!released && !reading && !lastRead && failure == null && view != null && nextPartition != null) {
      val wanted = math.min(MaxFramesPerRead, (if (creditBased) credit else MaxFramesPerRead) - ready.size)
      if (wanted > 0) {
        reading = true
        framesToRead = wanted
        if (!scheduler.submit(readTask, nextPartition.shuffleId, nextPartition.producerId, nextOffset)) {
          reading = false
          failure = new IOException("The Sluice server is shutting down")
          queue.notifyReaderAvailable(this)
        }
      }
    }

  /**
   * Reads up to `framesToRead` frames while read buffers are free, handing each to the event loop
   * as it is read (read thread).
   */
  private val readTask: PartitionReadScheduler.Read = buffers => {
    var error: Throwable = null
    var exhausted = false
    var starved = false
    var n = 0
    val wanted = framesToRead
    try {
      while (!released && !exhausted && !starved && n < wanted) {
        val f = readFrame(buffers)
        if (f == null) exhausted = true
        else if (f eq CreditBasedUnionViewReader.NoBuffer) starved = true
        else {
          n += 1
          if (f.last) exhausted = true
          if (!queue.runOnLoop(() => onFrame(f))) f.release()
        }
      }
    } catch { case e: Throwable => error = e }
    val v = view
    val partition = if (error == null && !exhausted) v.nextPartition else null
    val offset = if (partition == null) 0L else v.nextOffset
    val e = error
    val done = exhausted
    queue.runOnLoop(() => onReadDone(e, done, partition, offset))
  }

  /** A frame was read (event loop): it waits for the writer, or is dropped when released. */
  private def onFrame(f: ReadFrame): Unit =
    if (released) f.release()
    else {
      ready.add(f)
      if (ready.size == 1) queue.notifyReaderAvailable(this)
    }

  /** A read ended (event loop): keep its failure for the writer, note where the next read starts. */
  private def onReadDone(error: Throwable, exhausted: Boolean, partition: ResultPartitionID, offset: Long): Unit = {
    reading = false
    if (!released) {
      if (error != null) { failure = error; queue.notifyReaderAvailable(this) }
      if (exhausted) lastRead = true
      nextPartition = partition
      nextOffset = offset
      scheduleRead()
    }
  }

  /**
   * Takes the next frame's entries from the view and reads their stored bytes into a buffer of
   * `buffers` (read thread). An entry that would overrun the receiver's buffer or the frame length
   * waits for the next frame, as does one that finds no buffer free (then the frame ends, or, when
   * it is the frame's first, [[CreditBasedUnionViewReader.NoBuffer]] ends the read).
   */
  private def readFrame(buffers: PartitionReadScheduler.Buffers): ReadFrame = {
    val v = view
    val entries = new ArrayBuffer[PackedEntry](16)
    var payload: ByteBuf = null
    var bytes = 0
    var frameBytes = NettyMessage.FrameHeaderLength + PackedBufferResponse.FixedLength
    var full = false
    var starved = false
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
          if (s != null && payload == null) payload = buffers.take()
          if (s != null && payload == null) starved = true
          if (starved || entries.nonEmpty &&
            (bytes + size > maxPayload || frameBytes + entry.encodedLength + size > maxFrameLength)) {
            carried = next
            carriedInput = input
            full = true
          } else {
            if (s != null) {
              if (bytes + size > payload.capacity()) {
                throw new IllegalStateException(s"A stored buffer of $size bytes does not fit the server's read " +
                  s"buffers of ${payload.capacity()} bytes (${io.sluice.config.SluiceOptions.SegmentSize.key}): " +
                  s"${describe} was written with a larger segment size")
              }
              try reads.add(s, payload)
              catch { case e: IOException => throw new UnreadablePayloadException(receiverId, e, size.toLong) }
            }
            entries += entry
            bytes += size
            frameBytes += entry.encodedLength + size
          }
        }
      }
      try reads.flush()
      catch { case e: IOException => throw new UnreadablePayloadException(receiverId, e, bytes.toLong) }
      scheduler.recordFileReads(reads.numReads, reads.numBytes)
      reads.numReads = 0
      reads.numBytes = 0L
      if (entries.isEmpty) {
        if (starved) CreditBasedUnionViewReader.NoBuffer
        else {
          if (v.isReleased) throw new ProducerFailedException(firstInput, null)
          null
        }
      } else {
        val f = new ReadFrame(ArraySeq.unsafeWrapArray(entries.toArray), payload, bytes,
          v.backlogFrames(maxPayload) + (if (carried != null) 1 else 0), carried == null && v.isFinished)
        payload = null
        f
      }
    } finally {
      reads.discard()
      if (payload != null) payload.release()
    }
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
    val f = ready.poll()
    if (f == null) return null
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
    var f = ready.poll()
    while (f != null) { f.release(); f = ready.poll() }
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

  /** Frames one read reads at most before other readers' reads go first. */
  val MaxFramesPerRead = 8

  /**
   * A frame read, waiting for the event loop: its entries, its payload (a read buffer of the
   * scheduler; null: ends only) and what follows it.
   */
  final class ReadFrame(val entries: IndexedSeq[PackedEntry], val payload: ByteBuf, val bytes: Int, val backlog: Int,
      val last: Boolean) {

    def release(): Unit = if (payload != null) payload.release()
  }

  /** What [[CreditBasedUnionViewReader.readFrame]] answers when no read buffer was free for its first stored buffer. */
  val NoBuffer: ReadFrame = new ReadFrame(IndexedSeq.empty, null, 0, 0, false)
}
