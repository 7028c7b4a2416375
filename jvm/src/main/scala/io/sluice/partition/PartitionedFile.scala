package io.sluice.partition

import java.io.{File, IOException}
import java.nio.ByteBuffer
import java.nio.channels.FileChannel
import java.nio.file.StandardOpenOption

import io.netty.buffer.ByteBuf
import io.sluice.buffer.BlockCodec

/**
 * The file of one blocking result partition in Spark's local dirs (Flink's PartitionedFile): its
 * buffers, appended in the order they were written by its [[PartitionedFileWriter]], each
 * compressed on its own when that saves space, checksummed, encrypted when Spark's I/O encryption
 * is on, and the index file beside it ([[PartitionedFileIndex$]]), written when the file is
 * finished; a finished file keeps only its totals in the heap. A subpartition's buffers read back in the order
 * they were written; with a sort-merge writer they come region after region (one region per spill).
 * Buffers are read back as stored: readers decrypt, verify and decompress them (a remote reader's
 * gate does, after they crossed the network as they lie in the file).
 *
 * Made by [[PartitionedFile.create]] to be written, by [[PartitionedFile.adopt]] over a finished
 * file another executor wrote, or by [[PartitionedFile.restore]] when the [[ResultPartitionManager]]
 * rebuilds a finished partition from its table row. Only the writer holds a file handle, and only until
 * [[finishWriting]]. A task thread reading the file opens its own read-only
 * [[PartitionedFileReader]], so an interrupted reader (Java NIO closes an interruptible channel when
 * its thread is interrupted) closes nothing but its own; the server's read threads share one
 * reader per file, kept open between readers by the [[PartitionedFileReaderCache]] and closed when
 * the file is deleted or the cache drops it.
 *
 * Writing is done by the producer's task thread only; once [[finishWriting]] returns, any number
 * of readers may read concurrently. [[delete]] may come from any thread.
 */
final class PartitionedFile private (
    val path: File,
    val numSubpartitions: Int,
    fileIv: Option[BufferIv],
    initialWriter: Option[PartitionedFileWriter],
    adoptedBuffers: Int,
    adoptedLength: Long,
    indexCache: PartitionedFileIndexCache,
    mayLoadIndex: Boolean) {

  /** The writer until the file is finished; an adopted file never had one. */
  @volatile private var writer: PartitionedFileWriter = initialWriter.orNull
  @volatile private var finished = initialWriter.isEmpty
  @volatile private var deleted = false
  // The finished file's totals: all the heap it keeps of its index (the rest is in the index file).
  @volatile private var totalBuffers = adoptedBuffers
  @volatile private var totalBytes = adoptedLength

  /** The server's cache that kept a reader of this file, told when the file is deleted. */
  @volatile private[partition] var readerCache: PartitionedFileReaderCache = _

  /**
   * The partition the [[ResultPartitionManager]] rebuilt over this file: whoever keeps the file (a
   * kept reader) keeps it, so the manager finds that one again and releases it with the file.
   */
  @volatile private[partition] var partition: AnyRef = _
  private val ivOrNull = fileIv.orNull
  private val indexKey = if (indexCache == null) null else PartitionedFileIndexCache.key(path)
  // Whether a reader of this file may still load its whole index into the cache (at most one, once).
  private val indexLoad = new java.util.concurrent.atomic.AtomicBoolean(mayLoadIndex)

  // ---- writing (producer thread) -------------------------------------------------------------

  /** See [[PartitionedFileWriter.beginBuffer]]. */
  private[partition] def beginBuffer(maxLength: Int): Long = writable().beginBuffer(maxLength)

  /** See [[PartitionedFileWriter.endBuffer]]. */
  private[partition] def endBuffer(subpartition: Int, length: Int): Unit = {
    val w = writer
    if (w == null) throw new IllegalStateException(s"no buffer of $path was begun")
    w.endBuffer(subpartition, length)
  }

  /** See [[PartitionedFileWriter.writeBuffer]]. */
  private[partition] def writeBuffer(subpartition: Int, src: ByteBuffer, srcAddress: Long, length: Int): Unit =
    writable().writeBuffer(subpartition, src, srcAddress, length)

  /** Appends one buffer of `subpartition` (its readable bytes); the buffer is left untouched. */
  def write(subpartition: Int, data: ByteBuf): Unit = writable().write(subpartition, data)

  /**
   * Writes what is staged and the index file, closes the writer's handle and opens the file for
   * readers; the writer, and with it the in-memory index, is dropped.
   */
  def finishWriting(): Unit = if (!finished) {
    val w = writable()
    val index = w.finish()
    totalBuffers = w.numBuffers
    totalBytes = w.length
    writer = null
    finished = true
    keep(index)
  }

  /** The producer gave up writing (producer thread): its staging goes back, its handle is closed. */
  def abortWriting(): Unit = if (!finished) {
    val w = writer
    if (w != null) w.abort()
  }

  private def writable(): PartitionedFileWriter = {
    if (finished) throw new IllegalArgumentException(s"$path is already complete")
    if (deleted) throw new IOException(s"$path was released while being written")
    writer
  }

  // ---- reading (any thread, once finished) ---------------------------------------------------

  def isFinished: Boolean = finished

  def isDeleted: Boolean = deleted

  /** The index file beside the data file (see [[PartitionedFileIndex$]]). */
  lazy val indexPath: File = PartitionedFile.indexPathOf(path)

  /** Stored buffers of `subpartition` (reads the index file: for tests and tools). */
  def numBuffers(subpartition: Int): Int = numBuffers(subpartition, subpartition + 1)

  /**
   * Stored buffers of subpartitions [start, end), from the index the cache keeps or else the index
   * file's directory (opened for this read alone: a view asks it only for a backlog wanted before
   * its first buffer).
   */
  def numBuffers(start: Int, end: Int): Int = {
    checkReadable()
    val c = indexCache
    val kept = if (c == null) null else c.get(indexKey)
    if (c != null) c.countNeeded(PartitionedFileIndexRange.CountBytes)
    if (kept != null) {
      kept.serve(PartitionedFileIndexRange.CountBytes)
      PartitionedFileIndexRange.count(kept.bytes, indexPath, totalBuffers, start, end)
    } else {
      if (c != null) c.countRead(PartitionedFileIndexRange.CountBytes)
      withIndexChannel(PartitionedFileIndexRange.count(_, indexPath, totalBuffers, start, end))
    }
  }

  /** The `i`-th buffer of `subpartition` (reads the index file: for tests and tools, not per buffer). */
  def buffer(subpartition: Int, i: Int): SpilledBuffer = {
    val range = readIndexRangeAlone(subpartition, subpartition + 1)
    if (i < 0 || i >= range.size) {
      throw new IndexOutOfBoundsException(s"subpartition $subpartition of $path has no buffer $i")
    }
    spilledBuffer(range, i, null)
  }

  /** Stored (possibly compressed) bytes of each subpartition: what MapStatus reports (reads the index file). */
  def subpartitionSizes: Array[Long] = {
    val range = readIndexRangeAlone(0, numSubpartitions)
    val sizes = new Array[Long](numSubpartitions)
    var sp = 0
    var i = 0
    while (i < range.size) {
      sp = range.subpartitionOf(i, sp)
      sizes(sp) += range.storedLength(i)
      i += 1
    }
    sizes
  }

  /**
   * The index entries of subpartitions [start, end): from the index the [[PartitionedFileIndexCache]]
   * keeps, else read through `indexChannel` (a reader's, opened only then): the whole index when
   * this is the file's first reader and the cache reserved room for it, otherwise the range alone.
   * A file's index is thus read whole at most once by its readers (a second load after the cache
   * dropped it would read it whole for readers that need little of it).
   */
  private[partition] def readIndexRange(start: Int, end: Int, indexChannel: () => FileChannel): PartitionedFileIndexRange = {
    checkReadable()
    val c = indexCache
    if (c == null) return PartitionedFileIndexRange.read(indexChannel(), indexPath, numSubpartitions, totalBuffers, start, end)
    val kept = c.get(indexKey)
    val range =
      if (kept != null) {
        val r = PartitionedFileIndexRange.of(kept.bytes, indexPath, numSubpartitions, totalBuffers, start, end)
        kept.serve(r.bytesInFile)
        r
      } else {
        val length = PartitionedFileIndex.indexFileLength(numSubpartitions, totalBuffers)
        val reservation =
          if (c.admits(length.toLong) && indexLoad.compareAndSet(true, false)) c.reserve(indexKey, length) else null
        if (reservation == null) {
          val r = PartitionedFileIndexRange.read(indexChannel(), indexPath, numSubpartitions, totalBuffers, start, end)
          c.countRead(r.bytesInFile)
          r
        } else {
          val index =
            try PartitionedFileIndexRange.load(indexChannel(), indexPath, numSubpartitions, totalBuffers)
            catch { case e: Throwable => reservation.cancel(); throw e }
          c.countRead(length.toLong)
          reservation.fill(index) // dropped if the file was deleted meanwhile: its delete removed the reservation
          val r = PartitionedFileIndexRange.of(index, indexPath, numSubpartitions, totalBuffers, start, end)
          reservation.entry.serve(r.bytesInFile)
          r
        }
      }
    c.countNeeded(range.bytesInFile)
    range
  }

  /** Leaves the whole index file's bytes, which the writer holds, with the cache, unless the file is deleted (any thread). */
  private def keep(index: Array[Byte]): Unit = {
    val c = indexCache
    if (c != null && index != null && !deleted) {
      c.put(indexKey, index)
      if (deleted) c.remove(indexKey) // deleted meanwhile: its delete may have looked before this put
    }
  }

  private def withIndexChannel[T](read: FileChannel => T): T = {
    val ch = openIndexChannel()
    try read(ch)
    finally ch.close()
  }

  /** [[readIndexRange]] through a handle of the index opened for this read alone, if it needs one. */
  private def readIndexRangeAlone(start: Int, end: Int): PartitionedFileIndexRange = {
    var ch: FileChannel = null
    try readIndexRange(start, end, () => { if (ch == null) ch = openIndexChannel(); ch })
    finally if (ch != null) ch.close()
  }

  private def openIndexChannel(): FileChannel = {
    checkReadable()
    try FileChannel.open(indexPath.toPath, StandardOpenOption.READ)
    catch { case e: IOException => checkReadable(); throw e } // released meanwhile: say so
  }

  /** Stored buffer `i` of `range`, read through `reader` while that is open (null: a reader of its own). */
  private[partition] def spilledBuffer(range: PartitionedFileIndexRange, i: Int, reader: PartitionedFileReader): SpilledBuffer = {
    val offset = range.offset(i)
    new SpilledBuffer(this, reader, offset, range.storedLength(i), range.rawLength(i), range.crc(i),
      if (ivOrNull == null) null else ivOrNull.plus(offset))
  }

  /** Whether the buffers are stored encrypted (Spark's I/O encryption). */
  def isEncrypted: Boolean = fileIv.isDefined

  /** The IV the file was encrypted from (see [[BufferIv]]), when it is encrypted. */
  private[partition] def iv: Option[BufferIv] = fileIv

  /** Bytes of the file. */
  def size: Long = totalBytes

  /** Stored buffers of the file, all subpartitions together. */
  def numBuffersTotal: Int = totalBuffers

  /** Fails with an IOException when the file is not complete or was released. */
  private[partition] def checkReadable(): Unit = {
    if (deleted) throw new IOException(s"$path was released")
    if (!finished) throw new IOException(s"$path is still being written")
  }

  /**
   * Deletes the file and its index file (the partition was released), closing the writer's handle if it is still
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
        if (indexCache != null) indexCache.remove(indexKey)
      } finally PartitionedFile.deleteFiles(path)
    }
  }

  override def toString: String = s"PartitionedFile($path)"
}

object PartitionedFile {

  /** The index file of the data file at `path`: beside it, in the same local directory. */
  def indexPathOf(path: File): File = new File(path.getPath + ".index")

  /** Deletes the data file at `path` and its index file (a released partition nobody reads). */
  private[partition] def deleteFiles(path: File): Unit =
    try path.delete()
    finally indexPathOf(path).delete()

  /**
   * The finished file at `path` whose totals the [[ResultPartitionManager]] kept (the rest is in
   * its index file): readable at once, never written. `mayLoadIndex`: whether one of its readers may
   * load the whole index into `indexCache` (only the first object rebuilt for a file may).
   */
  private[partition] def restore(path: File, numSubpartitions: Int, iv: Option[BufferIv], numBuffers: Int,
      length: Long, indexCache: PartitionedFileIndexCache, mayLoadIndex: Boolean = true): PartitionedFile =
    new PartitionedFile(path, numSubpartitions, iv, None, numBuffers, length, indexCache, mayLoadIndex)

  /**
   * The finished file at `path` found on disk, its totals read from its index file's header (a
   * node shuffle service serving map outputs an executor wrote): readable at once, never written.
   * An IOException naming the file when it is missing or its index does not describe it.
   */
  private[partition] def openFinished(path: File, indexCache: PartitionedFileIndexCache): PartitionedFile = {
    val h = PartitionedFileIndex.readHeader(path, indexPathOf(path))
    new PartitionedFile(path, h.numSubpartitions, h.iv, None, h.numBuffers, h.fileLength, indexCache,
      mayLoadIndex = true)
  }

  /**
   * A new file at `path` (created now: an IOException when it exists or cannot be created) for a
   * partition of `numSubpartitions`, to be written by the producer and then read; its index goes
   * to [[indexPathOf]] when it is finished. `codec` compresses each buffer (spark.shuffle.compress);
   * `cipher` encrypts them (Spark's I/O encryption), from a random IV of the file's own. The
   * finished index goes to `indexCache` as well, when there is one.
   */
  def create(path: File, numSubpartitions: Int, codec: Option[BlockCodec],
      cipher: Option[PartitionedFileCipher] = None, indexCache: PartitionedFileIndexCache = null): PartitionedFile = {
    val index = new PartitionedFileIndex(numSubpartitions)
    val iv = cipher.map(_.newFileIv())
    val writer = new PartitionedFileWriter(path, indexPathOf(path), index, codec, cipher.map(_.newBufferCipher()), iv)
    new PartitionedFile(path, numSubpartitions, iv, Some(writer), 0, 0L, indexCache, mayLoadIndex = false)
  }

  /**
   * A finished file another executor wrote, received into `path`, with the index that executor
   * encoded (decommissioning, see [[PartitionedFileIndex$]]), which is written beside it: readable at
   * once, never written. Fails with an IOException naming what is wrong when the index is not one
   * of `id`, is malformed, or does not fit the file; the file is left where it is (and no index
   * file beside it).
   */
  def adopt(id: ResultPartitionID, path: File, encodedIndex: Array[Byte],
      indexCache: PartitionedFileIndexCache = null): PartitionedFile = {
    val d = PartitionedFileIndex.decode(id, path, encodedIndex)
    val indexPath = indexPathOf(path)
    try {
      val ch = FileChannel.open(indexPath.toPath, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)
      try while (d.indexFile.hasRemaining) ch.write(d.indexFile)
      finally ch.close()
    } catch {
      case e: Throwable =>
        if (!e.isInstanceOf[java.nio.file.FileAlreadyExistsException]) indexPath.delete()
        throw e
    }
    new PartitionedFile(path, d.numSubpartitions, d.iv, None, d.numBuffers, d.fileLength, indexCache, mayLoadIndex = false)
  }
}
