package io.sluice.netty

import java.util.zip.CRC32C

import io.sluice.partition._

/**
 * The server's end of one remote input channel of a pipelined partition (Flink's
 * CreditBasedSequenceNumberingViewReader): the subpartition view it reads, the credit its receiver
 * announced and the sequence number of the next message. It turns the in-memory buffers the view
 * hands out into BufferResponses (one credit each, with the backlog piggy-backed) and the final
 * EndOfPartition (no credit needed); each with the CRC32C of its bytes when the partition asks for
 * checksums in transit (Spark's spark.shuffle.streaming.checksum.enabled, on by default, as Spark's
 * streaming shuffle checksums its network buffers), verified by the receiving gate. A blocking
 * partition's files are read by a
 * [[CreditBasedUnionViewReader]], never on the event loop: a request that waited for a producer
 * and finds a blocking partition fails.
 *
 * Credit and sequence number belong to the connection's event loop. The view is created on the
 * event loop or, when the request waited for its producer, on the producer's thread; availability
 * notifications come from producer and flusher threads and only hand the reader to the loop.
 */
private[netty] final class CreditBasedSequenceNumberingViewReader(
    val receiverId: InputChannelID,
    val partitionId: ResultPartitionID,
    val subpartitionStart: Int,
    val subpartitionEnd: Int,
    initialCredit: Int,
    val creditBased: Boolean,
    queue: PartitionRequestQueue)
  extends NetworkSequenceViewReader with BufferAvailabilityListener with PendingViewRequest {

  @volatile private var view: ResultSubpartitionView = _
  @volatile private var released = false

  /** The CRC32C of each buffer sent, when its partition asks for checksums in transit (event loop). */
  @volatile private var crc: CRC32C = _
  private var credit = initialCredit
  private var sequenceNumber = 0
  private var finished = false

  /** Opens the view now; throws PartitionNotFoundException and the view's own errors. */
  def requestSubpartitionView(manager: ResultPartitionManager): Unit =
    view = createView(manager.getPartition(partitionId).getOrElse(throw new PartitionNotFoundException(partitionId)))

  private def createView(partition: ResultPartition): ResultSubpartitionView = {
    if (partition.partitionType == ResultPartitionType.Blocking) {
      throw new IllegalArgumentException(s"Result partition $partitionId is blocking: it is read by the server's " +
        "read threads once finished, not by a reader waiting for its producer")
    }
    partition match {
      case p: PipelinedResultPartition if p.checksumsInTransit => crc = new CRC32C
      case _ =>
    }
    partition.createSubpartitionView(subpartitionStart, subpartitionEnd, this)
  }

  /** The producer registered its partition (its thread); the loop learns about the view. */
  override def serve(partition: ResultPartition): Unit = {
    try {
      val v = createView(partition)
      view = v
      if (released) v.releaseAllResources()
      queue.notifyReaderCreated(this)
    } catch {
      case e: Throwable => queue.notifyReaderFailed(this, e)
    }
  }

  override def notifyDataAvailable(): Unit = queue.notifyReaderNonEmpty(this)

  def hasView: Boolean = view != null

  override def isAvailable: Boolean = {
    val v = view
    v != null && !released && v.isAvailable(if (creditBased) credit else Int.MaxValue)
  }

  override def addCredit(n: Int): Unit = credit = if (credit > Int.MaxValue - n) Int.MaxValue else credit + n

  def currentCredit: Int = credit

  /**
   * The next message for the receiver, or null when the view has nothing. Throws the producer's
   * failure (ProducerFailedException) when the view was released under the reader.
   */
  override def getNextMessage(counters: TransportCounters): NettyMessage = {
    val v = view
    val next = v.getNextBuffer()
    if (next == null) {
      if (v.isReleased) throw new ProducerFailedException(partitionId, v.failureCause)
      null
    } else if (next.isEndOfPartition) {
      val m = EndOfPartition(receiverId, sequenceNumber, next.subpartition)
      sequenceNumber += 1
      finished = true
      m
    } else {
      if (creditBased) {
        credit -= 1
        if (credit < 0) counters.negativeCredits.increment()
      }
      val b = next.buffer
      if (b == null) throw new IllegalStateException(s"$this was handed a stored buffer: ${next}")
      val c = crc
      val m =
        if (c == null) BufferResponse(receiverId, sequenceNumber, next.backlog, next.subpartition, b)
        else {
          c.reset()
          c.update(b.nioBuffer(b.readerIndex(), b.readableBytes()))
          BufferResponse(receiverId, sequenceNumber, next.backlog, next.subpartition, compressed = false,
            hasChecksum = true, rawLength = -1, crc = c.getValue.toInt, payloadSize = b.readableBytes())(b)
        }
      sequenceNumber += 1
      m
    }
  }

  override def isFinished: Boolean = finished

  override def release(manager: ResultPartitionManager): Unit = if (!released) {
    released = true
    manager.cancelPending(partitionId, this)
    val v = view
    if (v != null && !v.isReleased) v.releaseAllResources()
  }

  override def isReleased: Boolean = released

  override def describe: String = partitionId.toString

  override def toString: String =
    s"reader $receiverId ($partitionId, subpartitions [$subpartitionStart, $subpartitionEnd), credit $credit)"
}
