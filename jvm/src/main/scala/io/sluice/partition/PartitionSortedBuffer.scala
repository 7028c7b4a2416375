package io.sluice.partition

import io.sluice.memory.{LocalBufferPool, NetworkBuffer}
import io.sluice.serialization.RecordFraming
import org.apache.spark.unsafe.Platform

/**
 * The sort buffer of a [[SortMergeResultPartition]] (Flink's PartitionSortedBuffer, FLINK-19582):
 * the frames of every subpartition, appended in arrival order to network buffers of the
 * partition's pool, and written out sorted by subpartition when it cannot grow any more.
 *
 * Its buffers form one logical address space (address = buffer number x segment size + offset),
 * so a frame may span buffers. Each entry is
 * {{{
 *   | next: int32 (native) | frame header: int32 (BE) | payload ... |
 * }}}
 * where `next` is the address of the next entry of the same subpartition (-1: none): a linked list
 * per subpartition, kept in the buffers themselves as Flink keeps its index entries, so indexing
 * costs 4 bytes of network memory per record and nothing on the heap. The 8-byte entry head never
 * spans buffers (an entry starts in the next buffer when fewer than 8 bytes are left).
 * [[spillTo]] walks each subpartition's list in order and packs its frames into segment-sized
 * buffers of the partition file, so a subpartition's data in one region ends at a frame boundary
 * and costs `ceil(bytes / segment size)` buffers, however many subpartitions there are.
 *
 * Producer thread only ([[numBuffers]] may be read by metrics from any thread).
 */
final class PartitionSortedBuffer(pool: LocalBufferPool, numSubpartitions: Int) {
  import PartitionSortedBuffer._

  private val segmentSize = pool.segmentSize
  /** Addresses are ints: the buffer stops growing below 2 GiB whatever the pool would give. */
  private val maxBuffers = math.max(1, Int.MaxValue / segmentSize - 1)
  private var buffers = new Array[NetworkBuffer](16)
  private var addresses = new Array[Long](16)
  @volatile private var held = 0
  private val firstEntry = Array.fill(numSubpartitions)(-1)
  private val lastEntry = Array.fill(numSubpartitions)(-1)
  private var writePosition = 0
  private var numEntries = 0

  /** Whether no frame was appended since the last spill. */
  def isEmpty: Boolean = numEntries == 0

  /** Network buffers the sort buffer holds (written or not). */
  def numBuffers: Int = held

  /** Bytes the entries take, heads and alignment included. */
  def numBytes: Int = writePosition

  /**
   * Appends one frame to `subpartition`: `header` (big-endian, as readers parse it) and `length`
   * bytes at (base, offset). Grows by buffers the pool gives without waiting; returns false, with
   * nothing written, when the frame does not fit.
   */
  def append(subpartition: Int, header: Int, base: AnyRef, offset: Long, length: Int): Boolean = {
    var at = writePosition
    val leftInBuffer = segmentSize - at % segmentSize
    if (leftInBuffer < EntryHeadSize) at += leftInBuffer
    val end = at.toLong + EntryHeadSize + length
    while (end > held.toLong * segmentSize) if (!grow()) return false
    val head = addresses(at / segmentSize) + at % segmentSize
    Platform.putInt(null, head, -1)
    Platform.putInt(null, head + 4, if (LittleEndian) Integer.reverseBytes(header) else header)
    copyIn(base, offset, at + EntryHeadSize, length)
    val last = lastEntry(subpartition)
    if (last < 0) firstEntry(subpartition) = at
    else Platform.putInt(null, addresses(last / segmentSize) + last % segmentSize, at)
    lastEntry(subpartition) = at
    writePosition = end.toInt
    numEntries += 1
    true
  }

  /** Adds `buffer` (the producer waited for it) to the sort buffer's memory. */
  def addBuffer(buffer: NetworkBuffer): Unit = {
    if (held == buffers.length) {
      buffers = java.util.Arrays.copyOf(buffers, held * 2)
      addresses = java.util.Arrays.copyOf(addresses, held * 2)
    }
    buffers(held) = buffer
    addresses(held) = buffer.memoryAddress()
    held += 1
  }

  private def grow(): Boolean = {
    if (held >= maxBuffers) return false
    val b = pool.requestBuffer()
    if (b == null) false else { addBuffer(b); true }
  }

  private def copyIn(base: AnyRef, offset: Long, at: Int, length: Int): Unit = {
    var pos = at
    var done = 0
    while (done < length) {
      val i = pos / segmentSize
      val off = pos - i * segmentSize
      val n = math.min(length - done, segmentSize - off)
      Platform.copyMemory(base, offset + done, null, addresses(i) + off, n)
      pos += n
      done += n
    }
  }

  /**
   * Writes every subpartition's frames, subpartition after subpartition and in arrival order
   * within each, to `file` as buffers of at most one segment, then empties the sort buffer (it
   * keeps its network buffers). Returns the number of buffers written.
   */
  def spillTo(file: PartitionFile): Int = {
    var written = 0
    var s = 0
    while (s < numSubpartitions) {
      var entry = firstEntry(s)
      if (entry >= 0) {
        var out = file.beginBuffer(segmentSize)
        var filled = 0
        while (entry >= 0) {
          val head = addresses(entry / segmentSize) + entry % segmentSize
          val rawHeader = Platform.getInt(null, head + 4)
          val header = if (LittleEndian) Integer.reverseBytes(rawHeader) else rawHeader
          var left = RecordFraming.HeaderSize + (if (header == RecordFraming.LatencyMarker) RecordFraming.LatencyMarkerSize else header)
          var src = entry + 4 // the frame: its header, then the payload
          while (left > 0) {
            if (filled == segmentSize) {
              file.endBuffer(s, filled)
              written += 1
              out = file.beginBuffer(segmentSize)
              filled = 0
            }
            val i = src / segmentSize
            val off = src - i * segmentSize
            val n = math.min(left, math.min(segmentSize - off, segmentSize - filled))
            Platform.copyMemory(null, addresses(i) + off, null, out + filled, n)
            src += n
            filled += n
            left -= n
          }
          entry = Platform.getInt(null, head)
        }
        file.endBuffer(s, filled)
        written += 1
        firstEntry(s) = -1
        lastEntry(s) = -1
      }
      s += 1
    }
    writePosition = 0
    numEntries = 0
    written
  }

  /** Gives back the buffers beyond the first `n` (the pool was made smaller); only when empty. */
  def trimTo(n: Int): Unit = {
    require(isEmpty, "only an empty sort buffer gives buffers back")
    while (held > math.max(0, n)) {
      held -= 1
      val b = buffers(held)
      buffers(held) = null
      b.release()
    }
  }

  /** Gives every buffer back to the pool and forgets what was appended (done, or failed). */
  def release(): Unit = {
    java.util.Arrays.fill(firstEntry, -1)
    java.util.Arrays.fill(lastEntry, -1)
    writePosition = 0
    numEntries = 0
    trimTo(0)
  }
}

object PartitionSortedBuffer {
  /** The entry head: the next entry's address and the frame header. */
  val EntryHeadSize = 8

  private val LittleEndian = java.nio.ByteOrder.nativeOrder() == java.nio.ByteOrder.LITTLE_ENDIAN
}
