package io.sluice.partition.consumer

import io.netty.buffer.ByteBuf
import io.sluice.netty.{PackedBufferResponse, TransportProtocolException}
import io.sluice.partition.BufferIv

/**
 * What a [[RemoteInputChannel]] received and its task has not taken yet (Flink's
 * RemoteInputChannel#receivedBuffers): stored buffers and ends of inputs, in arrival order, and how
 * many receiving buffers (frames) they occupy. A packed frame's entries are slices of one receiving
 * buffer, so its credit window counts [[numFrames]], never entries. It also knows which of the
 * channel's `inputs` ended, and refuses a packed frame whose entries do not fit them
 * ([[checkEntries]]). Not thread-safe: the channel's monitor guards it.
 *
 * @param describe the channel's description, for errors
 */
private[consumer] final class ReceivedBuffers(
    inputs: IndexedSeq[ChannelInput],
    producer: ProducerLocation,
    describe: () => String) {
  import ReceivedBuffers.Received

  private val queue = new java.util.ArrayDeque[Received]()
  private var frames = 0

  /** Inputs (positions in `inputs`) whose end arrived. */
  private val inputsEnded = new java.util.BitSet(inputs.size)

  def isEmpty: Boolean = queue.isEmpty
  def size: Int = queue.size

  /** Receiving buffers (frames) with an entry the task has not taken yet. */
  def numFrames: Int = frames

  def add(r: Received): Unit = {
    queue.add(r)
    if (r.endsFrame) frames += 1
  }

  /** The end of every input arrived at once (an EndOfPartition message, which ends no frame). */
  def addEndOfAll(subpartition: Int): Unit = {
    inputsEnded.set(0, inputs.size)
    add(Received.end(inputs.head.index, subpartition, endsFrame = false))
  }

  /** Whether the end of every input arrived. */
  def allInputsEnded: Boolean = inputsEnded.cardinality() == inputs.size

  /**
   * Null when every entry of `r` names an input of the request that has not ended yet (and marks
   * the ends as arrived), else the protocol error: a bad peer's stray, repeated or late entry must
   * not count an input's end twice.
   */
  def checkEntries(r: PackedBufferResponse): TransportProtocolException = {
    r.entries.foreach { e =>
      val what = if (e.isEnd) "the end" else "data"
      if (e.input >= inputs.size) {
        return new TransportProtocolException(s"$producer sent $what of input ${e.input} to ${describe()}, " +
          s"which requested ${inputs.size}")
      }
      if (inputsEnded.get(e.input)) {
        return new TransportProtocolException(s"$producer sent $what of input ${e.input} " +
          s"(${inputs(e.input).partitionId}) to ${describe()} after that input's end")
      }
      if (e.isEnd) inputsEnded.set(e.input)
    }
    null
  }

  /**
   * Queues the entries of packed frame `r`, checked by [[checkEntries]] (entry inputs are positions
   * in `inputs`): its data entries as slices of its one receiving buffer `r.data` (the caller drops
   * its own reference).
   */
  def addPacked(r: PackedBufferResponse): Unit = {
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
