package io.sluice.partition

import java.io.{File, IOException}
import java.nio.ByteBuffer

import io.netty.buffer.ByteBuf
import io.sluice.buffer.BlockCodec

/**
 * The file of one blocking result partition in Spark's local dirs (Flink's PartitionedFile): its
 * buffers, appended in the order they were written by its [[PartitionFileWriter]], each
 * compressed on its own when that saves space, checksummed, encrypted when Spark's I/O encryption
 * is on, and its in-memory [[PartitionFileIndex]]. A subpartition's buffers read back in the order
 * they were written; with a sort-merge writer they come region after region (one region per spill).
 * Buffers are read back as stored: readers decrypt, verify and decompress them (a remote reader's
 * gate does, after they crossed the network as they lie in the file).
 *
 * Made by [[PartitionFile.create]] to be written, or by [[PartitionFile.adopt]] over a finished
 * file another executor wrote. Only the writer holds a file handle, and only until
 * [[finishWriting]]. A task thread reading the file opens its own read-only
 * [[PartitionFileReader]], so an interrupted reader (Java NIO closes an interruptible channel when
 * its thread is interrupted) closes nothing but its own; the server's event loops share one
 * reader per file, kept open between readers by the [[PartitionFileReaderCache]] and closed when
 * the file is deleted or the cache drops it.
 *
 * Writing is done by the producer's task thread only; once [[finishWriting]] returns, any number
 * of readers may read concurrently. [[delete]] may come from any thread.
 */
final class PartitionFile private (
    val path: File,
    index: PartitionFileIndex,
    fileIv: Option[BufferIv],
    initialWriter: Option[PartitionFileWriter]) {

  /** The writer until the file is finished; an adopted file never had one. */
  @volatile private var writer: PartitionFileWriter = initialWriter.orNull
  @volatile private var finished = initialWriter.isEmpty
  @volatile private var deleted = false

  /** The server's cache that kept a reader of this file, told when the file is deleted. */
  @volatile private[partition] var readerCache: PartitionFileReaderCache = _
  private val ivOrNull = fileIv.orNull

  // ---- writing (producer thread) -------------------------------------------------------------

  /** See [[PartitionFileWriter.beginBuffer]]. */
  private[partition] def beginBuffer(maxLength: Int): Long = writable().beginBuffer(maxLength)

  /** See [[PartitionFileWriter.endBuffer]]. */
  private[partition] def endBuffer(subpartition: Int, length: Int): Unit = {
    val w = writer
    if (w == null) throw new IllegalStateException(s"no buffer of $path was begun")
    w.endBuffer(subpartition, length)
  }

  /** See [[PartitionFileWriter.writeBuffer]]. */
  private[partition] def writeBuffer(subpartition: Int, src: ByteBuffer, srcAddress: Long, length: Int): Unit =
    writable().writeBuffer(subpartition, src, srcAddress, length)

  /** Appends one buffer of `subpartition` (its readable bytes); the buffer is left untouched. */
  def write(subpartition: Int, data: ByteBuf): Unit = writable().write(subpartition, data)

  /** Writes what is staged, closes the writer's handle and opens the file for readers. */
  def finishWriting(): Unit = if (!finished) {
    writable().finish()
    writer = null
    index.trim()
    finished = true
  }

  /** The producer gave up writing (producer thread): its staging goes back, its handle is closed. */
  def abortWriting(): Unit = if (!finished) {
    val w = writer
    if (w != null) w.abort()
  }

  private def writable(): PartitionFileWriter = {
    if (finished) throw new IllegalArgumentException(s"$path is already complete")
    if (deleted) throw new IOException(s"$path was released while being written")
    writer
  }

  // ---- reading (any thread, once finished) ---------------------------------------------------

  def isFinished: Boolean = finished

  def isDeleted: Boolean = deleted

  def numBuffers(subpartition: Int): Int = index.count(subpartition)

  /** Stored buffers of subpartitions [start, end) (a loop: a view is opened per map output and reader). */
  def numBuffers(start: Int, end: Int): Int = {
    var n = 0
    var s = start
    while (s < end) { n += index.count(s); s += 1 }
    n
  }

  /** The `i`-th buffer of `subpartition` (walks its chain: for tests and tools, not per buffer). */
  def buffer(subpartition: Int, i: Int): SpilledBuffer = {
    if (i < 0 || i >= numBuffers(subpartition)) {
      throw new IndexOutOfBoundsException(s"subpartition $subpartition of $path has no buffer $i")
    }
    var b = index.first(subpartition)
    var k = 0
    while (k < i) { b = index.next(b); k += 1 }
    spilledBuffer(b, null)
  }

  /** Number of the first stored buffer of `subpartition`, or -1 when it has none. */
  private[partition] def firstBuffer(subpartition: Int): Int = index.first(subpartition)

  /** Number of the buffer after `buffer` in the same subpartition, or -1 after its last. */
  private[partition] def nextBuffer(buffer: Int): Int = index.next(buffer)

  /** Stored buffer number `buffer`, read through `reader` while that is open (null: a reader of its own). */
  private[partition] def spilledBuffer(buffer: Int, reader: PartitionFileReader): SpilledBuffer = {
    val offset = index.offset(buffer)
    new SpilledBuffer(this, reader, offset, index.storedLength(buffer), index.rawLength(buffer), index.crc(buffer),
      if (ivOrNull == null) null else ivOrNull.plus(offset))
  }

  /** Whether the buffers are stored encrypted (Spark's I/O encryption). */
  def isEncrypted: Boolean = fileIv.isDefined

  /** The IV the file was encrypted from (see [[BufferIv]]), when it is encrypted. */
  private[partition] def iv: Option[BufferIv] = fileIv

  /** Stored (possibly compressed) bytes of one subpartition: what MapStatus reports. */
  def storedBytes(subpartition: Int): Long = index.storedBytes(subpartition)

  /** The finished file's index, for [[PartitionFileIndex.encode]] (immutable once finished). */
  private[partition] def finishedIndex: PartitionFileIndex = {
    checkReadable()
    index
  }

  /** Subpartitions of the file. */
  def numSubpartitions: Int = index.numSubpartitions

  /** Bytes of the file. */
  def size: Long = index.totalStored

  /** Stored buffers of the file, all subpartitions together. */
  def numBuffersTotal: Int = index.size

  /** Fails with an IOException when the file is not complete or was released. */
  private[partition] def checkReadable(): Unit = {
    if (deleted) throw new IOException(s"$path was released")
    if (!finished) throw new IOException(s"$path is still being written")
  }

  /**
   * Deletes the file (the partition was released), closing the writer's handle if it is still
   * open; readers that have the file open may finish (the data stays until they close it), new
   * ones cannot open it. Any thread; idempotent.
   */
  def delete(): Unit = synchronized {
    if (!deleted) {
      deleted = true
      try {
        val w = writer
        if (w != null) w.closeChannel()
        val c = readerCache
        if (c != null) c.forget(this)
      } finally path.delete()
    }
  }

  override def toString: String = s"PartitionFile($path)"
}

object PartitionFile {

  /**
   * A new file at `path` (created now: an IOException when it exists or cannot be created) for a
   * partition of `numSubpartitions`, to be written by the producer and then read. `codec`
   * compresses each buffer (spark.shuffle.compress); `cipher` encrypts them (Spark's I/O
   * encryption), from a random IV of the file's own.
   */
  def create(path: File, numSubpartitions: Int, codec: Option[BlockCodec],
      cipher: Option[PartitionFileCipher] = None): PartitionFile = {
    val index = new PartitionFileIndex(numSubpartitions)
    val iv = cipher.map(_.newFileIv())
    val writer = new PartitionFileWriter(path, index, codec, cipher.map(_.newBufferCipher()), iv)
    new PartitionFile(path, index, iv, Some(writer))
  }

  /**
   * A finished file another executor wrote, received into `path`, with the index that executor
   * encoded (decommissioning, see [[PartitionFileIndex]]): readable at once, never written. Fails
   * with an IOException naming what is wrong when the index is not one of `id`, is malformed, or
   * does not fit the file; the file is left where it is.
   */
  def adopt(id: ResultPartitionID, path: File, encodedIndex: Array[Byte]): PartitionFile = {
    val (index, iv) = PartitionFileIndex.decode(id, path, encodedIndex)
    index.trim()
    new PartitionFile(path, index, iv, None)
  }
}
