package io.sluice.partition.consumer

import io.netty.buffer.ByteBuf
import io.sluice.netty.PackedBufferResponse
import io.sluice.partition.BufferIv

/**
 * What a [[RemoteInputChannel]] received and its task has not taken yet (Flink's
 * RemoteInputChannel#receivedBuffers): stored buffers and ends of inputs, in arrival order, and how
 * many receiving buffers (frames) they occupy. A packed frame's entries are slices of one receiving
 * buffer, so its credit window counts [[numFrames]], never entries. Not thread-safe: the channel's
 * monitor guards it.
 */
private[consumer] final class ReceivedBuffers {
  import ReceivedBuffers.Received

  private val queue = new java.util.ArrayDeque[Received]()
  private var frames = 0

  def isEmpty: Boolean = queue.isEmpty
  def size: Int = queue.size

  /** Receiving buffers (frames) with an entry the task has not taken yet. */
  def numFrames: Int = frames

  def add(r: Received): Unit = {
    queue.add(r)
    if (r.endsFrame) frames += 1
  }

  /**
   * Queues the entries of packed frame `r` (entry inputs are positions in `inputs`): its data
   * entries as slices of its one receiving buffer `r.data` (the caller drops its own reference).
   */
  def addPacked(r: PackedBufferResponse, inputs: IndexedSeq[ChannelInput]): Unit = {
    var offset = r.data.readerIndex()
    val last = r.entries.size - 1
    var i = 0
    while (i <= last) {
      val e = r.entries(i)
      val input = inputs(e.input).index
      if (e.isEnd) add(Received.end(input, e.subpartition, endsFrame = i == last))
      else {
        add(new Received(input, r.data.retainedSlice(offset, e.length), e.subpartition, e.compressed, e.rawLength,
            e.hasChecksum, e.crc, e.iv, endsFrame = i == last))
        offset += e.length
      }
      i += 1
    }
  }

  /** The oldest entry, or null. */
  def poll(): Received = {
    val r = queue.poll()
    if (r != null && r.endsFrame) frames -= 1
    r
  }

  /** Every entry, which the caller releases; the queue is left empty. */
  def drain(): java.util.List[Received] = {
    val all = new java.util.ArrayList[Received](queue)
    queue.clear()
    frames = 0
    all
  }
}

private[consumer] object ReceivedBuffers {

  /**
   * A buffer of input `input` as it arrived (stored form), or (data == null) the end of that
   * input. `endsFrame`: the last entry of its frame (the task taking it frees a receiving buffer's
   * place in the window).
   */
  final class Received(val input: Int, val data: ByteBuf, val subpartition: Int, val compressed: Boolean,
      val rawLength: Int, val hasChecksum: Boolean, val crc: Int, val iv: BufferIv, val endsFrame: Boolean)

  object Received {
    def end(input: Int, subpartition: Int, endsFrame: Boolean): Received =
      new Received(input, null, subpartition, false, -1, false, 0, null, endsFrame)
  }
}
