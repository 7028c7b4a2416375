package io.sluice.partition.consumer

import io.sluice.partition._

/**
 * An input channel whose producers run in the same executor (Flink's LocalInputChannel): it reads
 * the subpartition views directly, with no network and, for in-memory buffers, no copy; spilled
 * buffers of a blocking partition are read from the file into the gate's read buffer, as stored
 * (the gate verifies, decrypts and decompresses them as it does remote ones).
 *
 * A gate reads every finished (blocking) map output of its own executor through one such channel:
 * with several inputs, one [[UnionResultSubpartitionView]] over all of them, opened when the
 * channel is requested, read input after input, each ending with its own end of partition. A
 * channel of one input reads its view directly; a pipelined partition is read that way, one
 * channel per input, and one not registered yet is waited for: the view opens the moment its
 * producer registers.
 */
final class LocalInputChannel(
    gate: SingleInputGate,
    channelIndex: Int,
    inputs: IndexedSeq[ChannelInput],
    producer: ProducerLocation,
    partitionManager: ResultPartitionManager,
    waitForProducer: Boolean)
  extends InputChannel(gate, channelIndex, inputs, producer)
  with BufferAvailabilityListener with PendingViewRequest {
  require(!waitForProducer || inputs.size == 1, s"a pipelined local channel reads one input, not ${inputs.size}")

  /** A channel of one input, whose index among the gate's inputs is the channel's. */
  def this(gate: SingleInputGate, channelIndex: Int, partitionId: ResultPartitionID, subpartitionStart: Int,
      subpartitionEnd: Int, producer: ProducerLocation, partitionManager: ResultPartitionManager,
      waitForProducer: Boolean) =
    this(gate, channelIndex, IndexedSeq(ChannelInput(channelIndex, partitionId, subpartitionStart, subpartitionEnd)),
      producer, partitionManager, waitForProducer)

  /** The view of the channel's one input. */
  @volatile private var view: ResultSubpartitionView = _

  /** The views of the channel's inputs, when it has several (finished partitions). */
  @volatile private var union: UnionResultSubpartitionView = _
  @volatile private var released = false
  private var endReached = false

  override def isRemote: Boolean = false

  /**
   * Opens the views. A partition that is gone (released, or never here) fails this channel, not the
   * call, as a remote channel's error response would: the task sees it when it reads the channel,
   * so the reader can name the map output to recompute.
   */
  override def requestSubpartitions(): Unit = {
    if (waitForProducer) partitionManager.createSubpartitionViewOrWait(partitionId, this)
    else {
      try {
        if (inputs.size == 1)
          view = partitionManager.createSubpartitionView(partitionId, subpartitionStart, subpartitionEnd, this)
        else {
          val u = UnionResultSubpartitionView.open(partitionManager,
            inputs.map(in => (in.partitionId, in.subpartitionStart, in.subpartitionEnd)), this, sharedFiles = false)
          if (released) u.releaseAllResources() else union = u
        }
      } catch {
        case e @ (_: PartitionNotFoundException | _: ProducerFailedException) => setError(e)
      }
    }
  }

  /** The producer registered its partition (maybe on its own thread). */
  override def serve(partition: ResultPartition): Unit = {
    try {
      val v = partition.createSubpartitionView(subpartitionStart, subpartitionEnd, this)
      if (released) v.releaseAllResources() else view = v
    } catch {
      case e: Throwable => setError(e)
    }
    notifyChannelNonEmpty()
  }

  override def notifyDataAvailable(): Unit = notifyChannelNonEmpty()

  override def getNextBuffer(): BufferAndAvailability = {
    checkError()
    val u = union
    if (u != null) return fromUnion(u)
    val v = view
    if (v == null) return null
    val next = v.getNextBuffer()
    if (next == null) {
      if (v.isReleased && !endReached)
        throw new InputChannelException(this, new ProducerFailedException(partitionId, v.failureCause))
      null
    } else if (next.isEndOfPartition) {
      endReached = true
      BufferAndAvailability.endOfPartition(inputs.head.index, next.subpartition)
    } else deliver(next, inputs.head.index, v.isAvailable(1))
  }

  private def fromUnion(u: UnionResultSubpartitionView): BufferAndAvailability = {
    val next =
      try u.getNextBuffer()
      catch {
        case e: ProducerFailedException =>
          throw new InputChannelException(this, e,
            inputs(if (e.input >= 0 && e.input < inputs.size) e.input else math.min(u.currentInput, inputs.size - 1)).index)
      }
    if (next == null) null
    else {
      val input = inputs(u.lastInput).index
      if (next.isEndOfPartition) BufferAndAvailability.endOfPartition(input, next.subpartition, !u.isFinished)
      else deliver(next, input, moreAvailable = true)
    }
  }

  private def deliver(next: BufferAndBacklog, input: Int, moreAvailable: Boolean): BufferAndAvailability = {
    if (next.buffer != null) {
      new BufferAndAvailability(input, next.buffer, next.subpartition, false, -1, false, 0, moreAvailable)
    } else {
      val s = next.spilled
      val target = gate.localReadBuffer(s.storedLength)
      try s.readInto(target)
      catch {
        case e: Throwable => target.release(); throw new InputChannelException(this, e, input)
      }
      new BufferAndAvailability(input, target, next.subpartition, s.isCompressed, s.rawLength, true, s.crc, moreAvailable, s.iv)
    }
  }

  override def releaseAllResources(): Unit = if (!released) {
    released = true
    val u = union
    if (u != null) u.releaseAllResources()
    partitionManager.cancelPending(partitionId, this)
    val v = view
    if (v != null && !v.isReleased) {
      // A blocking partition is read again by others: only this reader's cursor goes. A pipelined
      // subpartition is read once: releasing it frees its queued buffers.
      v.releaseAllResources()
    }
  }
}
