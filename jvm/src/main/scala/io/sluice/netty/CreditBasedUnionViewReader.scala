package io.sluice.netty

import scala.collection.mutable.ArrayBuffer

import io.sluice.partition._

/**
 * The server's end of a remote input channel that reads several finished partitions of this
 * executor at once (a [[MultiPartitionRequest]]): one [[UnionResultSubpartitionView]], one credit
 * and one sequence of [[PackedBufferResponse]]s. Each frame packs as many stored buffers (and
 * ends of inputs) as fit the receiver's buffer of `maxPayload` bytes, at most
 * [[PackedBufferResponse.MaxEntries]], so a reducer reading hundred-byte map outputs spends one
 * credit, one frame and one wake-up per segment, not per output (Flink's sort-merge reader packs
 * small regions into full buffers the same way). Each frame costs one credit; the backlog sent
 * with it counts the stored buffers still to come, an upper bound of the frames.
 *
 * Confined to the connection's event loop, except the availability notifications.
 */
private[netty] final class CreditBasedUnionViewReader(
    request: MultiPartitionRequest,
    maxPayload: Int,
    queue: PartitionRequestQueue) extends NetworkSequenceViewReader with BufferAvailabilityListener {

  override val receiverId: InputChannelID = request.receiverId
  private val creditBased = request.creditBased
  @volatile private var view: UnionResultSubpartitionView = _
  @volatile private var released = false
  private var credit = request.credit
  private var sequenceNumber = 0
  private var finished = false

  /** A stored buffer taken from the view that did not fit the previous frame, and its input. */
  private var carried: BufferAndBacklog = _
  private var carriedInput = -1

  /** Opens every requested input's view; throws PartitionNotFoundException for a missing one. */
  def open(manager: ResultPartitionManager): Unit = {
    val v = UnionResultSubpartitionView.open(manager,
      request.inputs.map(in => (in.partitionId, in.subpartitionStart, in.subpartitionEnd)), this, sharedFiles = true)
    view = v
    if (released) v.releaseAllResources()
  }

  override def notifyDataAvailable(): Unit = queue.notifyReaderNonEmpty(this)

  override def isAvailable: Boolean = {
    val v = view
    v != null && !released && !finished && (!creditBased || credit > 0)
  }

  override def addCredit(n: Int): Unit = credit = if (credit > Int.MaxValue - n) Int.MaxValue else credit + n

  override def getNextMessage(counters: TransportCounters): NettyMessage = {
    val v = view
    val entries = new ArrayBuffer[PackedEntry](16)
    val spilled = new ArrayBuffer[SpilledBuffer](16)
    var bytes = 0
    var full = false
    while (!full && entries.size < PackedBufferResponse.MaxEntries) {
      val next = if (carried != null) carried else v.getNextBuffer()
      val input = if (carried != null) carriedInput else v.lastInput
      carried = null
      if (next == null) full = true
      else if (next.isEndOfPartition) entries += PackedEntry.end(input, next.subpartition)
      else {
        val s = next.spilled
        if (s == null) {
          next.recycle()
          throw new IllegalStateException(s"$this was handed an in-memory buffer; only stored buffers are packed")
        }
        if (bytes + s.storedLength > maxPayload && spilled.nonEmpty) {
          carried = next
          carriedInput = input
          full = true
        } else {
          entries += PackedEntry.of(input, s, next.subpartition)
          spilled += s
          bytes += s.storedLength
        }
      }
    }
    if (entries.isEmpty) {
      if (v.isReleased) throw new ProducerFailedException(request.inputs.head.partitionId, null)
      return null
    }
    if (carried == null && v.isFinished) finished = true
    if (creditBased) {
      credit -= 1
      if (credit < 0) counters.negativeCredits.increment()
    }
    val backlog = v.backlog + (if (carried != null) 1 else 0)
    val m = PackedBufferResponse(receiverId, sequenceNumber, backlog, entries.toIndexedSeq, bytes)(null, spilled.toIndexedSeq)
    sequenceNumber += 1
    m
  }

  override def isFinished: Boolean = finished

  override def release(manager: ResultPartitionManager): Unit = if (!released) {
    released = true
    carried = null
    val v = view
    if (v != null) v.releaseAllResources()
  }

  override def isReleased: Boolean = released

  override def describe: String = {
    val first = request.inputs.head
    s"${request.inputs.size} partitions (${first.partitionId}${if (request.inputs.size > 1) ", ..." else ""})"
  }

  override def toString: String = s"reader $receiverId (${describe}, credit $credit)"
}
