package io.sluice.partition

import java.io.{File, IOException}
import java.nio.{BufferUnderflowException, ByteBuffer}

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
    // The subpartition of every buffer, from the chains (the index stores only the chains).
    val subpartitionOf = new Array[Int](n)
    var sp = 0
    while (sp < index.numSubpartitions) {
      var b = index.first(sp)
      while (b >= 0) { subpartitionOf(b) = sp; b = index.next(b) }
      sp += 1
    }
    val out = ByteBuffer.allocate(HeaderSize + n * EntrySize)
    out.putInt(Magic).put(Version).putInt(id.shuffleId).putLong(id.producerId)
      .putInt(index.numSubpartitions).putLong(fileLength).putInt(n)
    val iv = partition.file.iv
    out.put((if (iv.isDefined) 1 else 0).toByte).putLong(iv.fold(0L)(_.high)).putLong(iv.fold(0L)(_.low))
    var i = 0
    while (i < n) {
      out.putInt(subpartitionOf(i)).putLong(index.offsets(i)).putInt(index.stored(i)).putInt(index.raw(i))
        .putInt(index.crcs(i))
      i += 1
    }
    out.array()
  }

  /**
   * A finished, readable PartitionFile over `path`, which holds the bytes of the file `index` was
   * encoded from. Fails with an IOException naming what is wrong when the index is not one of
   * `id`, is malformed, or does not fit the file; the file is left where it is.
   */
  def adopt(id: ResultPartitionID, path: File, index: Array[Byte]): PartitionFile = {
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
      val adopted = new PartitionFile.Index(numSubpartitions)
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
        adopted.add(sp, offset, stored, raw, crc)
        end = offset + stored
        i += 1
      }
      PartitionFile.adopt(path, adopted, if (encrypted == 1) Some(iv) else None)
    } catch {
      case _: BufferUnderflowException => corrupt(s"it ends early (${index.length} bytes)")
    }
  }
}
