package io.sluice.partition

import java.io.{File, IOException}
import java.nio.{BufferUnderflowException, ByteBuffer}

/**
 * The index of a [[PartitionFile]] (the role of Flink's PartitionedFile index and of hybrid
 * shuffle's PartitionFileIndex): where every stored buffer lies (offset, stored and raw length,
 * CRC32C), numbered in file order, and each subpartition's buffers as a chain through those
 * numbers. A subpartition's chain runs through the file's regions (one per spill) in the order
 * they were written. Its size grows with the buffers written, plus 24 bytes per subpartition: a
 * map output with thousands of reduce partitions stays small however long it lives.
 *
 * Filled by the file's [[PartitionFileWriter]] on the producer's thread; immutable once the file
 * is finished (or adopted), when any number of readers may read it.
 */
private[partition] final class PartitionFileIndex(val numSubpartitions: Int) {
  private val firstOf = Array.fill(numSubpartitions)(-1)
  private val lastOf = Array.fill(numSubpartitions)(-1)
  private val countOf = new Array[Int](numSubpartitions)
  private val storedBytesOf = new Array[Long](numSubpartitions)
  private var offsets = new Array[Long](64)
  private var stored = new Array[Int](64)
  private var raw = new Array[Int](64)
  private var crcs = new Array[Int](64)
  private var nexts = new Array[Int](64)
  private var numBuffers = 0
  private var totalStoredBytes = 0L

  /** Appends buffer number [[size]]: `storedLen` bytes at `offset` of `subpartition` (`rawLen` -1: not compressed). */
  def add(subpartition: Int, offset: Long, storedLen: Int, rawLen: Int, crc: Int): Unit = {
    if (numBuffers == offsets.length) resize(numBuffers * 2)
    val b = numBuffers
    offsets(b) = offset; stored(b) = storedLen; raw(b) = rawLen; crcs(b) = crc; nexts(b) = -1
    if (lastOf(subpartition) < 0) firstOf(subpartition) = b else nexts(lastOf(subpartition)) = b
    lastOf(subpartition) = b
    countOf(subpartition) += 1
    storedBytesOf(subpartition) += storedLen
    totalStoredBytes += storedLen
    numBuffers += 1
  }

  /** Drops the arrays' slack once no buffer will be added. */
  def trim(): Unit = if (numBuffers < offsets.length) resize(numBuffers)

  private def resize(n: Int): Unit = {
    offsets = java.util.Arrays.copyOf(offsets, n)
    stored = java.util.Arrays.copyOf(stored, n)
    raw = java.util.Arrays.copyOf(raw, n)
    crcs = java.util.Arrays.copyOf(crcs, n)
    nexts = java.util.Arrays.copyOf(nexts, n)
  }

  /** Stored buffers, all subpartitions together. */
  def size: Int = numBuffers

  /** Bytes of the file: every stored buffer's. */
  def totalStored: Long = totalStoredBytes

  /** Number of the first buffer of `subpartition`, -1 when it has none. */
  def first(subpartition: Int): Int = firstOf(subpartition)

  /** Number of the buffer after `buffer` in its subpartition, -1 after its last. */
  def next(buffer: Int): Int = nexts(buffer)

  def count(subpartition: Int): Int = countOf(subpartition)

  def storedBytes(subpartition: Int): Long = storedBytesOf(subpartition)

  def offset(buffer: Int): Long = offsets(buffer)

  def storedLength(buffer: Int): Int = stored(buffer)

  /** Length before compression, -1 when stored raw. */
  def rawLength(buffer: Int): Int = raw(buffer)

  def crc(buffer: Int): Int = crcs(buffer)

  /** The subpartition of every buffer, in file order (the index itself keeps only the chains). */
  def subpartitions: Array[Int] = {
    val of = new Array[Int](numBuffers)
    var sp = 0
    while (sp < numSubpartitions) {
      var b = firstOf(sp)
      while (b >= 0) { of(b) = sp; b = nexts(b) }
      sp += 1
    }
    of
  }
}

/**
 * The index of a finished [[PartitionFile]] as bytes: what a reader needs besides the file's own
 * bytes to read it on another executor. Flink's PartitionedFile keeps its index in a file beside
 * the data; Sluice keeps it in memory and writes it out only when a finished blocking partition
 * moves to another executor (Spark's decommissioning, see the Spark layer's block resolver).
 *
 * {{{
 *   magic "SLPI" (int) | version (byte) | shuffleId (int) | producerId (long)
 *   | numSubpartitions (int) | fileLength (long) | numBuffers (int)
 *   | encrypted (byte, 0 or 1) | the file's IV (two longs; zeros when not encrypted)
 *   | numBuffers x [ subpartition (int) | offset (long) | stored (int) | raw (int, -1: not compressed) | crc32c (int) ]
 * }}}
 * Buffers are listed in file order, so reading them back rebuilds every subpartition's chain in
 * the order it was written. Everything is big-endian. The file's bytes move unchanged (stored
 * buffers stay compressed, and encrypted when spark.io.encryption is on, as they were written).
 * Stateless; thread-safe.
 */
object PartitionFileIndex {

  private val Magic = 0x534c5049 // "SLPI"
  private val Version: Byte = 1
  private val HeaderSize = 4 + 1 + 4 + 8 + 4 + 8 + 4 + 1 + 16
  private val EntrySize = 4 + 8 + 4 + 4 + 4

  /**
   * The index of `partition`'s finished file, whose length is `fileLength` (IOException when it
   * was released meanwhile).
   */
  def encode(partition: SortMergeResultPartition, fileLength: Long): Array[Byte] = {
    val id = partition.partitionId
    val index = partition.file.finishedIndex
    val n = index.size
    val subpartitionOf = index.subpartitions
    val out = ByteBuffer.allocate(HeaderSize + n * EntrySize)
    out.putInt(Magic).put(Version).putInt(id.shuffleId).putLong(id.producerId)
      .putInt(index.numSubpartitions).putLong(fileLength).putInt(n)
    val iv = partition.file.iv
    out.put((if (iv.isDefined) 1 else 0).toByte).putLong(iv.fold(0L)(_.high)).putLong(iv.fold(0L)(_.low))
    var i = 0
    while (i < n) {
      out.putInt(subpartitionOf(i)).putLong(index.offset(i)).putInt(index.storedLength(i)).putInt(index.rawLength(i))
        .putInt(index.crc(i))
      i += 1
    }
    out.array()
  }

  /**
   * The index and the IV (when encrypted) of the file of partition `id` received into `path`,
   * from what [[encode]] wrote on the executor that wrote the file ([[PartitionFile.adopt]] makes
   * the file of them). Fails with an IOException naming what is wrong when the index is not one of
   * `id`, is malformed, or does not fit the file; the file is left where it is.
   */
  private[partition] def decode(id: ResultPartitionID, path: File, index: Array[Byte]): (PartitionFileIndex, Option[BufferIv]) = {
    def corrupt(what: String): Nothing =
      throw new IOException(s"The index of migrated partition ($id) for $path is unusable: $what")
    val in = ByteBuffer.wrap(index)
    try {
      if (in.getInt() != Magic) corrupt("it does not start with Sluice's index magic")
      val version = in.get()
      if (version != Version) corrupt(s"version $version, this Sluice reads version $Version")
      val shuffleId = in.getInt()
      val producerId = in.getLong()
      if (shuffleId != id.shuffleId || producerId != id.producerId) {
        corrupt(s"it is the index of shuffle $shuffleId producer $producerId")
      }
      val numSubpartitions = in.getInt()
      if (numSubpartitions <= 0) corrupt(s"$numSubpartitions subpartitions")
      val fileLength = in.getLong()
      val numBuffers = in.getInt()
      val encrypted = in.get()
      if (encrypted != 0 && encrypted != 1) corrupt(s"encryption flag $encrypted")
      val iv = BufferIv(in.getLong(), in.getLong())
      if (numBuffers < 0 || in.remaining() != numBuffers.toLong * EntrySize) {
        corrupt(s"$numBuffers buffers announced, ${in.remaining()} bytes of entries follow")
      }
      val actual = path.length()
      if (actual != fileLength) corrupt(s"the file has $actual bytes, the index describes $fileLength")
      val decoded = new PartitionFileIndex(numSubpartitions)
      var end = 0L
      var i = 0
      while (i < numBuffers) {
        val sp = in.getInt()
        val offset = in.getLong()
        val stored = in.getInt()
        val raw = in.getInt()
        val crc = in.getInt()
        if (sp < 0 || sp >= numSubpartitions) corrupt(s"buffer $i belongs to subpartition $sp of $numSubpartitions")
        if (offset < end || stored <= 0 || offset + stored > fileLength || raw < -1 || raw == 0) {
          corrupt(s"buffer $i (offset $offset, $stored bytes stored, raw $raw) does not follow the one before " +
            s"(ending at $end) inside the $fileLength-byte file")
        }
        decoded.add(sp, offset, stored, raw, crc)
        end = offset + stored
        i += 1
      }
      (decoded, if (encrypted == 1) Some(iv) else None)
    } catch {
      case _: BufferUnderflowException => corrupt(s"it ends early (${index.length} bytes)")
    }
  }
}
