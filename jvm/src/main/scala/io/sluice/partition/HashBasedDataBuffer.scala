package io.sluice.partition

import io.sluice.memory.{LocalBufferPool, NetworkBuffer}
import io.sluice.serialization.RecordFraming
import org.apache.spark.unsafe.Platform

/**
 * The [[DataBuffer]] of a [[SortMergeResultPartition]] with few subpartitions for its pool (Flink's
 * HashBasedDataBuffer): every subpartition appends its frames to a chain of network buffers of its
 * own, and [[spillTo]] hands each buffer to the file as it is, compressed straight from network
 * memory. A frame's bytes are copied once, into its subpartition's buffer, where the
 * [[SortBasedDataBuffer]] copies each frame twice (in, then gathered out at the spill) and links
 * every entry to the next of its subpartition.
 *
 * Frames run on from one buffer of a subpartition into the next, header included, as in the
 * buffers the sort-based layout writes: readers see the same stream. A region holds, per
 * subpartition, full buffers and at most one partly filled last one.
 *
 * Producer thread only ([[numBuffers]] may be read by metrics from any thread).
 */
final class HashBasedDataBuffer(pool: LocalBufferPool, numSubpartitions: Int) extends DataBuffer(pool) {
  import HashBasedDataBuffer._

  // per held buffer: the bytes written, the next buffer of its subpartition (-1: none)
  private var filled = new Array[Int](16)
  private var next = new Array[Int](16)
  private var free = new Array[Int](16) // a stack of held buffers that belong to no subpartition
  private var numFree = 0
  private val firstBuffer = Array.fill(numSubpartitions)(-1)
  private val lastBuffer = Array.fill(numSubpartitions)(-1)
  private var numFrames = 0
  private val headerBytes = new Array[Byte](RecordFraming.HeaderSize) // a header that runs on into the next buffer

  override def isEmpty: Boolean = numFrames == 0

  override def append(subpartition: Int, header: Int, base: AnyRef, offset: Long, length: Int): Boolean = {
    val last = lastBuffer(subpartition)
    val room = if (last < 0) 0 else segmentSize - filled(last)
    val frame = RecordFraming.HeaderSize.toLong + length
    if (frame > room) {
      // Takes every buffer the frame needs before writing a byte, so a frame that does not fit leaves nothing.
      val needed = (frame - room + segmentSize - 1) / segmentSize
      while (numFree < needed) if (!grow()) return false
    }
    val h = if (LittleEndian) Integer.reverseBytes(header) else header
    if (room >= RecordFraming.HeaderSize) {
      Platform.putInt(null, addresses(last) + filled(last), h)
      filled(last) += RecordFraming.HeaderSize
    } else {
      Platform.putInt(headerBytes, Platform.BYTE_ARRAY_OFFSET, h)
      copyIn(subpartition, headerBytes, Platform.BYTE_ARRAY_OFFSET, RecordFraming.HeaderSize)
    }
    copyIn(subpartition, base, offset, length)
    numFrames += 1
    true
  }

  /** Copies `length` bytes to the end of `subpartition`'s chain, starting buffers from the free stack. */
  private def copyIn(subpartition: Int, base: AnyRef, offset: Long, length: Int): Unit = {
    var b = lastBuffer(subpartition)
    var done = 0
    while (done < length) {
      if (b < 0 || filled(b) == segmentSize) b = startBuffer(subpartition)
      val n = math.min(length - done, segmentSize - filled(b))
      Platform.copyMemory(base, offset + done, null, addresses(b) + filled(b), n)
      filled(b) += n
      done += n
    }
  }

  /** Chains a free buffer to the end of `subpartition`'s chain. */
  private def startBuffer(subpartition: Int): Int = {
    numFree -= 1
    val b = free(numFree)
    filled(b) = 0
    next(b) = -1
    val last = lastBuffer(subpartition)
    if (last < 0) firstBuffer(subpartition) = b else next(last) = b
    lastBuffer(subpartition) = b
    b
  }

  override def addBuffer(buffer: NetworkBuffer): Unit = {
    super.addBuffer(buffer)
    free(numFree) = held - 1
    numFree += 1
  }

  override protected def resize(n: Int): Unit = {
    super.resize(n)
    filled = java.util.Arrays.copyOf(filled, n)
    next = java.util.Arrays.copyOf(next, n)
    free = java.util.Arrays.copyOf(free, n)
  }

  override def spillTo(file: PartitionedFile): Int = {
    var written = 0
    var s = 0
    while (s < numSubpartitions) {
      var b = firstBuffer(s)
      while (b >= 0) {
        file.writeBuffer(s, buffers(b).segment.byteBuffer, addresses(b), filled(b))
        written += 1
        free(numFree) = b
        numFree += 1
        b = next(b)
      }
      firstBuffer(s) = -1
      lastBuffer(s) = -1
      s += 1
    }
    numFrames = 0
    written
  }

  override def trimTo(n: Int): Unit = {
    super.trimTo(n)
    // Empty: every buffer left is free.
    numFree = held
    var i = 0
    while (i < held) { free(i) = i; i += 1 }
  }

  override def release(): Unit = {
    java.util.Arrays.fill(firstBuffer, -1)
    java.util.Arrays.fill(lastBuffer, -1)
    numFrames = 0
    trimTo(0)
  }
}

object HashBasedDataBuffer {
  private val LittleEndian = java.nio.ByteOrder.nativeOrder() == java.nio.ByteOrder.LITTLE_ENDIAN
}
