package io.sluice.partition

import java.io.{File, IOException}
import java.nio.ByteBuffer
import java.nio.channels.FileChannel

/**
 * The index entries of subpartitions [start, end) of a finished [[PartitionedFile]], read from its
 * index file (see [[PartitionedFileIndex$]]) with two positional reads: the directory's entries
 * start .. end, then the range's entries, in the order a reader sends them (Flink's
 * PartitionedFileReader reads its region's index entries the same way), or taken from the whole
 * index the [[PartitionedFileIndexCache]] keeps. A [[BlockingSubpartitionView]] holds one for as
 * long as it reads. Immutable once read; one thread at a time.
 */
private[partition] final class PartitionedFileIndexRange private (
    val start: Int,
    directory: Array[Int],
    entries: ByteBuffer) {
  import PartitionedFileIndex.EntrySize

  /** Stored buffers of the range. */
  val size: Int = directory(directory.length - 1) - directory(0)

  /** Bytes of the index file the range occupies: its directory entries and its buffers' entries (what [[PartitionedFileIndexRange.read]] reads). */
  def bytesInFile: Long = 4L * directory.length + EntrySize.toLong * size

  /** The subpartition of entry `i`, searching forward from subpartition `from` (<= the answer). */
  def subpartitionOf(i: Int, from: Int): Int = {
    var sp = from
    while (directory(sp - start + 1) - directory(0) <= i) sp += 1
    sp
  }

  /** Stored buffers of subpartition `sp` of the range. */
  def count(sp: Int): Int = directory(sp - start + 1) - directory(sp - start)

  def offset(i: Int): Long = entries.getLong(i * EntrySize)

  def storedLength(i: Int): Int = entries.getInt(i * EntrySize + 8)

  /** Length before compression, -1 when stored raw. */
  def rawLength(i: Int): Int = entries.getInt(i * EntrySize + 12)

  def crc(i: Int): Int = entries.getInt(i * EntrySize + 16)
}

private[partition] object PartitionedFileIndexRange {

  /** Bytes of the index file a [[count]] reads: two directory entries. */
  val CountBytes = 8L

  /**
   * Reads the range [start, end) of the index file `path` (through `channel`) of a finished file
   * of `numSubpartitions` subpartitions and `numBuffers` stored buffers. An IOException names the
   * index file when it is shorter than that or its directory does not fit.
   */
  def read(channel: FileChannel, path: File, numSubpartitions: Int, numBuffers: Int, start: Int,
      end: Int): PartitionedFileIndexRange =
    readWith((into, at) => readFully(channel, path, into, at), path, numSubpartitions, numBuffers, start, end)

  /**
   * The range [start, end) of the index file that starts at `base` in `file` (a copy in Spark's
   * fallback storage, behind its envelope), read as [[read]] reads a local one.
   */
  def read(file: StoredFile, base: Long, numSubpartitions: Int, numBuffers: Int, start: Int,
      end: Int): PartitionedFileIndexRange =
    readWith((into, at) => file.readFully(base + at, into), file, numSubpartitions, numBuffers, start, end)

  private def readWith(readAt: (ByteBuffer, Long) => Unit, path: Any, numSubpartitions: Int, numBuffers: Int,
      start: Int, end: Int): PartitionedFileIndexRange = {
    val bytes = ByteBuffer.allocate(4 * (end - start + 1))
    readAt(bytes, PartitionedFileIndex.directoryAt(start))
    val directory = new Array[Int](end - start + 1)
    bytes.flip()
    bytes.asIntBuffer().get(directory)
    checkDirectory(path, directory, numBuffers, start, end)
    val n = directory(end - start) - directory(0)
    val entries = ByteBuffer.allocate(n * PartitionedFileIndex.EntrySize)
    readAt(entries, PartitionedFileIndex.entryAt(numSubpartitions, directory(0)))
    new PartitionedFileIndexRange(start, directory, entries)
  }

  /** The range [start, end) of `index`, a whole index file `path` kept in the heap ([[load]]). */
  def of(index: Array[Byte], path: File, numSubpartitions: Int, numBuffers: Int, start: Int,
      end: Int): PartitionedFileIndexRange = {
    val whole = ByteBuffer.wrap(index)
    val directory = new Array[Int](end - start + 1)
    var i = 0
    while (i < directory.length) { directory(i) = whole.getInt(PartitionedFileIndex.directoryAt(start + i).toInt); i += 1 }
    checkDirectory(path, directory, numBuffers, start, end)
    val at = PartitionedFileIndex.entryAt(numSubpartitions, directory(0)).toInt
    val entries = ByteBuffer.wrap(index, at, (directory(end - start) - directory(0)) * PartitionedFileIndex.EntrySize).slice()
    new PartitionedFileIndexRange(start, directory, entries)
  }

  /**
   * The whole index file `path` (through `channel`) of a finished file of `numSubpartitions` and
   * `numBuffers` stored buffers, in one read: IOException naming the file when it is shorter.
   */
  def load(channel: FileChannel, path: File, numSubpartitions: Int, numBuffers: Int): Array[Byte] = {
    val index = new Array[Byte](PartitionedFileIndex.indexFileLength(numSubpartitions, numBuffers))
    readFully(channel, path, ByteBuffer.wrap(index), 0L)
    index
  }

  /** Stored buffers of subpartitions [start, end), read from the index file's directory alone. */
  def count(channel: FileChannel, path: File, numBuffers: Int, start: Int, end: Int): Int = {
    val two = ByteBuffer.allocate(4)
    readFully(channel, path, two, PartitionedFileIndex.directoryAt(start))
    val first = two.getInt(0)
    two.clear()
    readFully(channel, path, two, PartitionedFileIndex.directoryAt(end))
    countChecked(path, numBuffers, start, end, first, two.getInt(0))
  }

  /** Stored buffers of subpartitions [start, end), from `index` kept in the heap. */
  def count(index: Array[Byte], path: File, numBuffers: Int, start: Int, end: Int): Int = {
    val whole = ByteBuffer.wrap(index)
    countChecked(path, numBuffers, start, end, whole.getInt(PartitionedFileIndex.directoryAt(start).toInt),
      whole.getInt(PartitionedFileIndex.directoryAt(end).toInt))
  }

  private def countChecked(path: Any, numBuffers: Int, start: Int, end: Int, first: Int, last: Int): Int = {
    if (first < 0 || last < first || last > numBuffers) corruptDirectory(path, start, end, first, last, numBuffers)
    last - first
  }

  private def checkDirectory(path: Any, directory: Array[Int], numBuffers: Int, start: Int, end: Int): Unit = {
    var i = 0
    while (i < directory.length) {
      val prev = if (i == 0) 0 else directory(i - 1)
      if (directory(i) < prev || directory(i) > numBuffers) {
        corruptDirectory(path, start, end, directory(0), directory(i), numBuffers)
      }
      i += 1
    }
  }

  private def corruptDirectory(path: Any, start: Int, end: Int, first: Int, last: Int, numBuffers: Int): Nothing =
    throw new IOException(s"The index $path is corrupt: subpartitions [$start, $end) own entries [$first, $last) " +
      s"of $numBuffers")

  private def readFully(channel: FileChannel, path: File, into: ByteBuffer, at: Long): Unit = {
    var pos = at
    while (into.hasRemaining) {
      val n = channel.read(into, pos)
      if (n < 0) throw new IOException(s"The index $path ends at $pos, before the ${into.limit()} bytes read at $at")
      pos += n
    }
  }
}
