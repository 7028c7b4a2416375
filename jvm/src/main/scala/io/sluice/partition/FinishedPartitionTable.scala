package io.sluice.partition

import java.io.File

/**
 * The finished blocking partitions of one shuffle, as the [[ResultPartitionManager]] keeps them:
 * per map output the producer id, its file's totals, where the file lies
 * ([[PartitionedFileLayout.code]]) and its IV when encrypted, in primitive arrays with an
 * open-addressing index of producer ids (no Flink counterpart: Flink keeps the whole partition).
 * Not thread-safe: the manager holds the table's lock.
 */
private[partition] final class FinishedPartitionTable(val shuffleId: Int) {

  private var n = 0
  private var producerIds = new Array[Long](4)
  private var lengths = new Array[Long](4)
  private var buffers = new Array[Int](4)
  private var subpartitions = new Array[Int](4)
  private var codes = new Array[Int](4) // PartitionedFileLayout.code; -1: the path is in `paths`
  private var flags = new Array[Byte](4) // Encrypted, IndexLoadGranted
  private var ivs: Array[Long] = _ // two longs per entry, once an encrypted file came
  private var paths: java.util.HashMap[java.lang.Long, File] = _ // files the layout cannot name (tests)
  private var index = new Array[Int](8) // entry + 1 (0: empty), linear probing
  private var bytes = 0L

  /** Set when the shuffle is released: the table is dropped and no lookup may find anything in it. */
  var released = false

  def size: Int = n

  /** Bytes of the table's files together. */
  def totalBytes: Long = bytes

  /** The entry of `producerId`, or -1. */
  def entryOf(producerId: Long): Int = {
    val b = bucketOf(producerId)
    if (b < 0) -1 else index(b) - 1
  }

  /** The entry of `producerId`, or -1 when it has none or the table is released (callers hold its lock). */
  def liveEntryOf(producerId: Long): Int = if (released) -1 else entryOf(producerId)

  def producerId(e: Int): Long = producerIds(e)
  def fileLength(e: Int): Long = lengths(e)
  def numBuffers(e: Int): Int = buffers(e)
  def numSubpartitions(e: Int): Int = subpartitions(e)
  def iv(e: Int): Option[BufferIv] =
    if ((flags(e) & FinishedPartitionTable.Encrypted) == 0) None else Some(BufferIv(ivs(2 * e), ivs(2 * e + 1)))

  /**
   * Whether the file of entry `e` is rebuilt for its readers for the first time, so a reader may load
   * its whole index into the cache ([[PartitionedFile.restore]]): true once per entry.
   */
  def grantIndexLoad(e: Int): Boolean = {
    val first = (flags(e) & FinishedPartitionTable.IndexLoadGranted) == 0
    flags(e) = (flags(e) | FinishedPartitionTable.IndexLoadGranted).toByte
    first
  }

  /** The code by which the layout finds entry `e`'s file, -1 when its path is kept instead. */
  def code(e: Int): Int = codes(e)

  /** The data file of entry `e`. */
  def path(e: Int, layout: Option[PartitionFileLocator]): File = {
    val id = ResultPartitionID(shuffleId, producerIds(e))
    if (codes(e) >= 0) layout.get.file(id, codes(e)) else paths.get(producerIds(e))
  }

  /** Adds finished `file` of producer `producerId` (not in the table yet), its path as `code`. */
  def add(producerId: Long, file: PartitionedFile, code: Int): Unit = {
    if (n == producerIds.length) grow(n + (n >> 2) + 4)
    if ((n + 1) * 5L > index.length * 4L) rehash(((n + 1) * 5L / 3).toInt + 1)
    producerIds(n) = producerId
    lengths(n) = file.size
    buffers(n) = file.numBuffersTotal
    subpartitions(n) = file.numSubpartitions
    codes(n) = code
    flags(n) = 0
    if (code < 0) {
      if (paths == null) paths = new java.util.HashMap()
      paths.put(producerId, file.path)
    }
    file.iv.foreach { iv =>
      if (ivs == null) ivs = new Array[Long](2 * producerIds.length)
      ivs(2 * n) = iv.high
      ivs(2 * n + 1) = iv.low
      flags(n) = FinishedPartitionTable.Encrypted
    }
    var b = home(producerId)
    while (index(b) != 0) b = next(b)
    index(b) = n + 1
    bytes += file.size
    n += 1
  }

  /** Removes the entry of `producerId`; false when it has none. */
  def remove(producerId: Long): Boolean = {
    val b = bucketOf(producerId)
    if (b < 0) return false
    val e = index(b) - 1
    deleteBucket(b)
    bytes -= lengths(e)
    if (codes(e) < 0) paths.remove(producerId)
    val last = n - 1
    if (e != last) { // the last entry moves into the hole
      var lb = home(producerIds(last))
      while (index(lb) != last + 1) lb = next(lb)
      index(lb) = e + 1
      producerIds(e) = producerIds(last); lengths(e) = lengths(last); buffers(e) = buffers(last)
      subpartitions(e) = subpartitions(last); codes(e) = codes(last); flags(e) = flags(last)
      if (ivs != null) { ivs(2 * e) = ivs(2 * last); ivs(2 * e + 1) = ivs(2 * last + 1) }
    }
    n = last
    true
  }

  private def home(producerId: Long): Int = {
    val h = java.lang.Long.hashCode(producerId) * 0x9e3779b9
    Math.floorMod(h ^ (h >>> 16), index.length)
  }

  private def next(b: Int): Int = if (b + 1 == index.length) 0 else b + 1

  private def bucketOf(producerId: Long): Int = {
    var b = home(producerId)
    while (index(b) != 0) {
      if (producerIds(index(b) - 1) == producerId) return b
      b = next(b)
    }
    -1
  }

  /** Empties bucket `hole`, moving later entries of the same probe run back into it (no tombstones). */
  private def deleteBucket(b: Int): Unit = {
    var hole = b
    var j = next(b)
    while (index(j) != 0) {
      val h = home(producerIds(index(j) - 1))
      val stays = if (hole <= j) hole < h && h <= j else hole < h || h <= j
      if (!stays) { index(hole) = index(j); hole = j }
      j = next(j)
    }
    index(hole) = 0
  }

  private def grow(capacity: Int): Unit = {
    producerIds = java.util.Arrays.copyOf(producerIds, capacity)
    lengths = java.util.Arrays.copyOf(lengths, capacity)
    buffers = java.util.Arrays.copyOf(buffers, capacity)
    subpartitions = java.util.Arrays.copyOf(subpartitions, capacity)
    codes = java.util.Arrays.copyOf(codes, capacity)
    flags = java.util.Arrays.copyOf(flags, capacity)
    if (ivs != null) ivs = java.util.Arrays.copyOf(ivs, 2 * capacity)
  }

  private def rehash(capacity: Int): Unit = {
    index = new Array[Int](capacity)
    var e = 0
    while (e < n) {
      var b = home(producerIds(e))
      while (index(b) != 0) b = next(b)
      index(b) = e + 1
      e += 1
    }
  }
}

private object FinishedPartitionTable {
  private val Encrypted: Byte = 1
  private val IndexLoadGranted: Byte = 2
}
