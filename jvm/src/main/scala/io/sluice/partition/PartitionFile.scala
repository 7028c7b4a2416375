package io.sluice.partition

import java.io.{File, IOException}
import java.nio.ByteBuffer
import java.nio.channels.{FileChannel, WritableByteChannel}
import java.nio.file.StandardOpenOption
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.zip.CRC32C

import io.netty.buffer.ByteBuf
import io.sluice.buffer.BlockCodec

/**
 * The file of one blocking result partition in Spark's local dirs: its buffers, appended in the
 * order they were spilled, each compressed on its own when that saves space and checksummed
 * (CRC32C of the stored bytes), and an in-memory index per subpartition. Spilled buffers of a
 * subpartition read back in the order they were written.
 *
 * Writing is done by the producer's task thread only; once [[finishWriting]] returns, any number
 * of readers may read concurrently (positional reads, no shared position).
 */
final class PartitionFile(val path: File, numSubpartitions: Int, codec: Option[BlockCodec]) {

  private val channel = FileChannel.open(path.toPath, StandardOpenOption.CREATE_NEW,
    StandardOpenOption.WRITE, StandardOpenOption.READ)
  private val index = Array.fill(numSubpartitions)(new PartitionFile.SubpartitionIndex)
  private var staging: ByteBuffer = _
  private var stagingStart = 0L // file offset of staging's first byte
  private val crc = new CRC32C
  @volatile private var finished = false
  @volatile private var deleted = false

  /** Appends one buffer of `subpartition` (its readable bytes); the buffer is left untouched. */
  def write(subpartition: Int, data: ByteBuf): Unit = {
    require(!finished, s"$path is already complete")
    val len = data.readableBytes()
    if (len == 0) return
    if (staging == null) { staging = PartitionFile.takeStaging(); stagingStart = channel.position() }
    val worst = codec.fold(len)(c => math.max(len, c.maxCompressedLength(len)))
    if (staging.capacity() - staging.position() < worst) flushStaging()
    if (staging.capacity() < worst) {
      // Segments larger than the staging buffer (spark.sluice.memory.segmentSize > 1m): a bigger one.
      PartitionFile.returnStaging(staging)
      staging = ByteBuffer.allocateDirect(worst)
    }
    val at = staging.position()
    val src = data.nioBuffer(data.readerIndex(), len)
    var stored = len
    var raw = -1
    codec.foreach { c =>
      val n = c.compress(src, src.position(), len, staging, at)
      if (n < len) { stored = n; raw = len }
    }
    if (raw < 0) staging.put(at, src, src.position(), len)
    val view = staging.duplicate(); view.limit(at + stored).position(at)
    crc.reset(); crc.update(view)
    index(subpartition).add(stagingStart + at, stored, raw, crc.getValue.toInt)
    staging.position(at + stored)
  }

  private def flushStaging(): Unit = if (staging != null && staging.position() > 0) {
    staging.flip()
    while (staging.hasRemaining) channel.write(staging)
    staging.clear()
    stagingStart = channel.position()
  }

  /** Writes what is staged and opens the file for readers. */
  def finishWriting(): Unit = if (!finished) {
    flushStaging()
    if (staging != null) { PartitionFile.returnStaging(staging); staging = null }
    finished = true
  }

  def isFinished: Boolean = finished

  def numBuffers(subpartition: Int): Int = index(subpartition).size

  def buffer(subpartition: Int, i: Int): SpilledBuffer = {
    val ix = index(subpartition)
    new SpilledBuffer(this, ix.offsets(i), ix.stored(i), ix.raw(i), ix.crcs(i))
  }

  /** Stored (possibly compressed) bytes of one subpartition: what MapStatus reports. */
  def storedBytes(subpartition: Int): Long = index(subpartition).totalStored

  /** Bytes of the file. */
  def size: Long = index.map(_.totalStored).sum

  private[partition] def read(offset: Long, length: Int, target: ByteBuf): Unit = {
    checkReadable()
    val bb = target.nioBuffer(target.writerIndex(), length)
    var pos = offset
    while (bb.hasRemaining) {
      val n = channel.read(bb, pos)
      if (n < 0) throw new IOException(s"$path ends at $pos, before the buffer at $offset (+$length) is complete")
      pos += n
    }
    target.writerIndex(target.writerIndex() + length)
  }

  private[partition] def transferTo(position: Long, count: Long, target: WritableByteChannel): Long = {
    checkReadable()
    channel.transferTo(position, count, target)
  }

  private def checkReadable(): Unit = {
    if (deleted) throw new IOException(s"$path was released")
    if (!finished) throw new IOException(s"$path is still being written")
  }

  /** Closes and deletes the file (the partition was released). */
  def delete(): Unit = synchronized {
    if (!deleted) {
      deleted = true
      if (staging != null) { PartitionFile.returnStaging(staging); staging = null }
      try channel.close() finally path.delete()
    }
  }
}

object PartitionFile {
  /** Size of the direct staging buffer through which a spill is written in large writes. */
  val StagingSize: Int = 1 << 20

  private val stagingPool = new ConcurrentLinkedQueue[ByteBuffer]()

  private def takeStaging(): ByteBuffer = {
    val b = stagingPool.poll()
    if (b != null) b else ByteBuffer.allocateDirect(StagingSize)
  }

  private def returnStaging(b: ByteBuffer): Unit = {
    b.clear()
    if (b.capacity() == StagingSize && stagingPool.size < 8) stagingPool.add(b)
  }

  /** Offsets, lengths and checksums of one subpartition's spilled buffers, in spill order. */
  private final class SubpartitionIndex {
    var offsets = new Array[Long](8)
    var stored = new Array[Int](8)
    var raw = new Array[Int](8)
    var crcs = new Array[Int](8)
    var size = 0
    var totalStored = 0L

    def add(offset: Long, storedLen: Int, rawLen: Int, crc: Int): Unit = {
      if (size == offsets.length) {
        offsets = java.util.Arrays.copyOf(offsets, size * 2)
        stored = java.util.Arrays.copyOf(stored, size * 2)
        raw = java.util.Arrays.copyOf(raw, size * 2)
        crcs = java.util.Arrays.copyOf(crcs, size * 2)
      }
      offsets(size) = offset; stored(size) = storedLen; raw(size) = rawLen; crcs(size) = crc
      size += 1
      totalStored += storedLen
    }
  }
}
