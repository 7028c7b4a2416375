package io.sluice.partition

import io.sluice.memory.LocalBufferPool
import io.sluice.serialization.RecordFraming
import org.apache.spark.unsafe.Platform

/**
 * The [[DataBuffer]] of a [[SortMergeResultPartition]] with many subpartitions (Flink's
 * SortBasedDataBuffer, first PartitionSortedBuffer, FLINK-19582): the frames of every
 * subpartition, appended in arrival order to network buffers of the partition's pool, and written
 * out sorted by subpartition when it cannot grow any more.
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
final class SortBasedDataBuffer(pool: LocalBufferPool, numSubpartitions: Int) extends DataBuffer(pool) {
  import SortBasedDataBuffer._

  /** Addresses are ints: the buffer stops growing below 2 GiB whatever the pool would give. */
  private val maxBuffers = math.max(1, Int.MaxValue / segmentSize - 1)
  private val firstEntry = Array.fill(numSubpartitions)(-1)
  private val lastEntry = Array.fill(numSubpartitions)(-1)
  private var writePosition = 0
  private var numEntries = 0

  override def isEmpty: Boolean = numEntries == 0

  /** Bytes the entries take, heads and alignment included. */
  def numBytes: Int = writePosition

  override def append(subpartition: Int, header: Int, base: AnyRef, offset: Long, length: Int): Boolean = {
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

  override protected def mayGrow: Boolean = held < maxBuffers

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

  override def spillTo(file: PartitionedFile): Int = {
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
          var left =
            RecordFraming.HeaderSize + (if (header == RecordFraming.LatencyMarker) RecordFraming.LatencyMarkerSize else header)
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

  override def release(): Unit = {
    java.util.Arrays.fill(firstEntry, -1)
    java.util.Arrays.fill(lastEntry, -1)
    writePosition = 0
    numEntries = 0
    trimTo(0)
  }
}

object SortBasedDataBuffer {

  /** The entry head: the next entry's address and the frame header. */
  val EntryHeadSize = 8

  private val LittleEndian = java.nio.ByteOrder.nativeOrder() == java.nio.ByteOrder.LITTLE_ENDIAN
}
