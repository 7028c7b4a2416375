package io.sluice.partition.consumer

import io.sluice.partition._

/**
 * An input channel whose producer runs in the same executor (Flink's LocalInputChannel): it reads
 * the subpartition view directly, with no network and, for in-memory buffers, no copy; spilled
 * buffers of a blocking partition are read from the file into the gate's read buffer, as stored
 * (the gate verifies, decrypts and decompresses them as it does remote ones). A pipelined
 * partition not registered yet is waited for: the view opens the moment its producer registers.
 */
final class LocalInputChannel(
    gate: SingleInputGate,
    channelIndex: Int,
    partitionId: ResultPartitionID,
    subpartitionStart: Int,
    subpartitionEnd: Int,
    producer: ProducerLocation,
    partitionManager: ResultPartitionManager,
    waitForProducer: Boolean)
  extends InputChannel(gate, channelIndex, partitionId, subpartitionStart, subpartitionEnd, producer)
    with BufferAvailabilityListener with PendingViewRequest {

  @volatile private var view: ResultSubpartitionView = _
  @volatile private var released = false
  private var endReached = false

  override def isRemote: Boolean = false

  /**
   * Opens the view. A partition that is gone (released, or never here) fails this channel, not the
   * call, as a remote channel's error response would: the task sees it when it reads the channel,
   * so the reader can name the map output to recompute.
   */
  override def requestSubpartitions(): Unit = {
    if (waitForProducer) partitionManager.createSubpartitionViewOrWait(partitionId, this)
    else {
      try view = partitionManager.createSubpartitionView(partitionId, subpartitionStart, subpartitionEnd, this)
      catch {
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
    val v = view
    if (v == null) return null
    val next = v.getNextBuffer()
    if (next == null) {
      if (v.isReleased && !endReached) throw new InputChannelException(this, new ProducerFailedException(partitionId, v.failureCause))
      null
    } else if (next.isEndOfPartition) {
      endReached = true
      BufferAndAvailability.endOfPartition(next.subpartition)
    } else if (next.buffer != null) {
      new BufferAndAvailability(next.buffer, next.subpartition, false, -1, false, 0, v.isAvailable(1))
    } else {
      val s = next.spilled
      val target = gate.localReadBuffer(s.storedLength)
      try s.readInto(target) catch {
        case e: Throwable => target.release(); throw new InputChannelException(this, e)
      }
      new BufferAndAvailability(target, next.subpartition, s.isCompressed, s.rawLength, true, s.crc, v.isAvailable(1), s.iv)
    }
  }

  override def releaseAllResources(): Unit = if (!released) {
    released = true
    partitionManager.cancelPending(partitionId, this)
    val v = view
    if (v != null && !v.isReleased) {
      // A blocking partition is read again by others: only this reader's cursor goes. A pipelined
      // subpartition is read once: releasing it frees its queued buffers.
      v.releaseAllResources()
    }
  }
}
