package io.sluice.partition

import java.io.{File, IOException}
import java.nio.ByteBuffer
import java.nio.channels.FileChannel
import java.nio.file.StandardOpenOption

/**
 * The index of a [[PartitionedFile]] while it is written (the role of Flink's PartitionedFile
 * index, kept by its PartitionedFileWriter): where every stored buffer lies (offset, stored and
 * raw length, CRC32C) and to which subpartition it belongs, in file order. When the file is
 * finished, [[writeTo]] writes it beside the data as the index file described in
 * [[PartitionedFileIndex$]], and the writer drops it: a finished file keeps no index in the heap.
 *
 * Producer thread only.
 */
private[partition] final class PartitionedFileIndex(val numSubpartitions: Int) {
  import PartitionedFileIndex._

  // Room for one buffer per subpartition from the start (up to 1024): a small map output stores about that many.
  private val initialCapacity = math.max(64, math.min(numSubpartitions, 1024))
  private var offsets = new Array[Long](initialCapacity)
  private var stored = new Array[Int](initialCapacity)
  private var raw = new Array[Int](initialCapacity)
  private var crcs = new Array[Int](initialCapacity)
  private var subpartitionOf = new Array[Int](initialCapacity)
  private var numBuffers = 0
  private var totalStoredBytes = 0L

  /** Appends buffer number [[size]]: `storedLen` bytes at `offset` of `subpartition` (`rawLen` -1: not compressed). */
  def add(subpartition: Int, offset: Long, storedLen: Int, rawLen: Int, crc: Int): Unit = {
    if (numBuffers == offsets.length) resize(numBuffers * 2)
    val b = numBuffers
    offsets(b) = offset; stored(b) = storedLen; raw(b) = rawLen; crcs(b) = crc; subpartitionOf(b) = subpartition
    totalStoredBytes += storedLen
    numBuffers += 1
  }

  private def resize(n: Int): Unit = {
    offsets = java.util.Arrays.copyOf(offsets, n)
    stored = java.util.Arrays.copyOf(stored, n)
    raw = java.util.Arrays.copyOf(raw, n)
    crcs = java.util.Arrays.copyOf(crcs, n)
    subpartitionOf = java.util.Arrays.copyOf(subpartitionOf, n)
  }

  /** Stored buffers, all subpartitions together. */
  def size: Int = numBuffers

  /** Bytes of the file: every stored buffer's. */
  def totalStored: Long = totalStoredBytes

  /** Offset of buffer `b` (in file order; tests). */
  def offset(b: Int): Long = offsets(b)

  def storedLength(b: Int): Int = stored(b)

  /**
   * Writes the index file at `indexPath` (created now) for a data file of `fileLength` bytes,
   * encrypted from `iv` when defined: the directory, then the entries grouped by subpartition,
   * in the order they were written within each (a stable counting sort of the file order).
   * Returns the index file's bytes.
   */
  def writeTo(indexPath: File, fileLength: Long, iv: Option[BufferIv]): Array[Byte] = {
    val n = numSubpartitions
    val directory = new Array[Int](n + 1)
    var b = 0
    while (b < numBuffers) { directory(subpartitionOf(b) + 1) += 1; b += 1 }
    var sp = 0
    while (sp < n) { directory(sp + 1) += directory(sp); sp += 1 }
    val out = ByteBuffer.allocate(indexFileLength(n, numBuffers))
    writeHeader(out, n, fileLength, numBuffers, iv)
    directory.foreach(out.putInt)
    val entriesAt = out.position()
    val next = java.util.Arrays.copyOf(directory, n) // where the next entry of each subpartition goes
    b = 0
    while (b < numBuffers) {
      val slot = next(subpartitionOf(b))
      next(subpartitionOf(b)) = slot + 1
      out.position(entriesAt + slot * EntrySize)
      out.putLong(offsets(b)).putInt(stored(b)).putInt(raw(b)).putInt(crcs(b))
      b += 1
    }
    out.clear()
    val ch = FileChannel.open(indexPath.toPath, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)
    try while (out.hasRemaining) ch.write(out)
    finally ch.close()
    out.array()
  }
}

/**
 * The index file of a finished [[PartitionedFile]], beside its data file (`<data>.index`, as
 * Flink's PartitionedFile keeps `.index` beside `.data` and Spark's sort shuffle keeps its
 * `.index` file):
 * {{{
 *   magic "SLPI" (int) | version (byte) | numSubpartitions (int) | fileLength (long)
 *   | numBuffers (int) | encrypted (byte, 0 or 1) | the file's IV (two longs; zeros when not encrypted)
 *   | directory: numSubpartitions + 1 ints, the number of the first entry of each subpartition
 *     (subpartition s owns entries [dir(s), dir(s + 1)); the last is numBuffers)
 *   | numBuffers x [ offset (long) | stored (int) | raw (int, -1: not compressed) | crc32c (int) ]
 * }}}
 * Entries are grouped by subpartition, in write order within each, so a reader of subpartitions
 * [start, end) reads dir(start .. end) with one positional read and its entries with another, in
 * the order it sends them ([[PartitionedFileIndexRange]]). Everything is big-endian.
 *
 * A finished partition moving to another executor (Spark's decommissioning, see the Spark layer's
 * block resolver) ships its index file behind a short envelope naming the partition
 * ([[encode]]); the receiver checks it against the partition and the received data file and writes
 * it beside that file ([[PartitionedFile.adopt]]); a copy in Spark's fallback storage keeps the
 * envelope, and its readers check it ([[readEnvelopedHeader]]):
 * {{{
 *   magic "SLPM" (int) | version (byte) | shuffleId (int) | producerId (long) | the index file
 * }}}
 * The file's bytes move unchanged (stored buffers stay compressed, and encrypted when
 * spark.io.encryption is on, as they were written). Stateless; thread-safe.
 */
object PartitionedFileIndex {

  private val Magic = 0x534c5049 // "SLPI"
  private val Version: Byte = 2
  private[partition] val HeaderSize = 4 + 1 + 4 + 8 + 4 + 1 + 2 * 8
  private[partition] val EntrySize = 8 + 4 + 4 + 4

  private val MigrationMagic = 0x534c504d // "SLPM"
  private val MigrationVersion: Byte = 1
  private[partition] val EnvelopeSize = 4 + 1 + 4 + 8

  /** Bytes of the index file of a file of `numSubpartitions` with `numBuffers` stored buffers. */
  private[partition] def indexFileLength(numSubpartitions: Int, numBuffers: Int): Int = {
    val n = HeaderSize + 4L * (numSubpartitions + 1) + EntrySize.toLong * numBuffers
    if (n > Int.MaxValue) throw new IOException(s"an index of $numBuffers buffers is larger than 2 GiB")
    n.toInt
  }

  /** Where `numSubpartitions`' directory entry `sp` lies in the index file. */
  private[partition] def directoryAt(sp: Int): Long = HeaderSize + 4L * sp

  /** Where entry `e` lies in the index file of a file of `numSubpartitions`. */
  private[partition] def entryAt(numSubpartitions: Int, e: Int): Long =
    HeaderSize + 4L * (numSubpartitions + 1) + EntrySize.toLong * e

  private def writeHeader(out: ByteBuffer, numSubpartitions: Int, fileLength: Long, numBuffers: Int,
      iv: Option[BufferIv]): Unit = {
    out.putInt(Magic).put(Version).putInt(numSubpartitions).putLong(fileLength).putInt(numBuffers)
    out.put((if (iv.isDefined) 1 else 0).toByte).putLong(iv.fold(0L)(_.high)).putLong(iv.fold(0L)(_.low))
  }

  /**
   * The index of `partition`'s finished file, whose length is `fileLength`, with the envelope
   * naming the partition (IOException when it was released meanwhile or its index does not
   * describe `fileLength` bytes).
   */
  def encode(partition: SortMergeResultPartition, fileLength: Long): Array[Byte] = {
    val file = partition.file
    file.checkReadable()
    val index = java.nio.file.Files.readAllBytes(file.indexPath.toPath)
    if (file.isDeleted) file.checkReadable()
    if (index.length < HeaderSize || ByteBuffer.wrap(index).getLong(9) != fileLength) {
      throw new IOException(s"the index of ${file.path} does not describe its $fileLength bytes")
    }
    val id = partition.partitionId
    val out = ByteBuffer.allocate(EnvelopeSize + index.length)
    out.putInt(MigrationMagic).put(MigrationVersion).putInt(id.shuffleId).putLong(id.producerId).put(index)
    out.array()
  }

  /** The totals an index file's header gives of its finished data file. */
  private[partition] final case class Header(numSubpartitions: Int, numBuffers: Int, fileLength: Long, iv: Option[BufferIv])

  /**
   * The header of the index file at `indexPath`, checked against its data file `path` (a node
   * service finds a finished map output on disk this way): an IOException naming the file when
   * either is missing, the index is not Sluice's or its header does not describe the data file.
   */
  private[partition] def readHeader(path: File, indexPath: File): Header = {
    def corrupt(what: String): Nothing = throw new IOException(s"The index file $indexPath is unusable: $what")
    val header = ByteBuffer.allocate(HeaderSize)
    val ch = FileChannel.open(indexPath.toPath, StandardOpenOption.READ)
    try {
      while (header.hasRemaining && ch.read(header, header.position().toLong) >= 0) {}
      if (header.hasRemaining) corrupt(s"it ends early (${header.position()} bytes)")
      header.flip()
      parseHeader(header, ch.size(), path.length(), s"the data file $path", corrupt)
    } finally ch.close()
  }

  /**
   * The header of a partition's index in Spark's fallback storage, where it lies behind the
   * envelope naming the partition ([[encode]]): read from `index`, checked to be `id`'s, to fit
   * the index's length and to describe `dataLength` bytes of data. An IOException naming `index`
   * otherwise. The index file itself starts at [[EnvelopeSize]].
   */
  private[partition] def readEnvelopedHeader(id: ResultPartitionID, index: StoredFile, dataLength: Long): Header = {
    def corrupt(what: String): Nothing =
      throw new IOException(s"The index of partition ($id) in the fallback storage, $index, is unusable: $what")
    if (index.length < EnvelopeSize + HeaderSize) corrupt(s"it has ${index.length} bytes")
    val bytes = ByteBuffer.allocate(EnvelopeSize + HeaderSize)
    index.readFully(0L, bytes)
    bytes.flip()
    checkEnvelope(bytes, id, corrupt)
    parseHeader(bytes, index.length - EnvelopeSize, dataLength, "the data file", corrupt)
  }

  /**
   * Reads, at `in`'s position, the envelope [[encode]] puts before a migrated index (magic, version,
   * the partition's id) and checks it names partition `id`.
   */
  private def checkEnvelope(in: ByteBuffer, id: ResultPartitionID, corrupt: String => Nothing): Unit = {
    if (in.getInt() != MigrationMagic) corrupt("it does not start with Sluice's index magic")
    val envelopeVersion = in.get()
    if (envelopeVersion != MigrationVersion) corrupt(s"version $envelopeVersion, this Sluice reads version $MigrationVersion")
    val shuffleId = in.getInt()
    val producerId = in.getLong()
    if (shuffleId != id.shuffleId || producerId != id.producerId) {
      corrupt(s"it is the index of shuffle $shuffleId producer $producerId")
    }
  }

  /** The header at `header`'s position, checked against the index's and the data file's lengths. */
  private def parseHeader(header: ByteBuffer, indexLength: Long, dataLength: Long, data: String,
      corrupt: String => Nothing): Header = {
    if (header.getInt() != Magic) corrupt("it does not start with Sluice's index magic")
    val version = header.get()
    if (version != Version) corrupt(s"index file version $version, this Sluice reads version $Version")
    val numSubpartitions = header.getInt()
    val fileLength = header.getLong()
    val numBuffers = header.getInt()
    val encrypted = header.get()
    val iv = BufferIv(header.getLong(), header.getLong())
    if (numSubpartitions <= 0 || numBuffers < 0 || fileLength < 0 || (encrypted != 0 && encrypted != 1)) {
      corrupt(s"$numSubpartitions subpartitions, $numBuffers buffers, $fileLength bytes, encryption flag $encrypted")
    }
    if (indexLength != indexFileLength(numSubpartitions, numBuffers)) {
      corrupt(s"$indexLength bytes, where $numBuffers buffers of $numSubpartitions subpartitions take " +
        s"${indexFileLength(numSubpartitions, numBuffers)}")
    }
    if (dataLength != fileLength) corrupt(s"$data has $dataLength bytes, the index describes $fileLength")
    Header(numSubpartitions, numBuffers, fileLength, if (encrypted == 1) Some(iv) else None)
  }

  /** What [[decode]] found in a received index: the finished file's totals, and its IV when encrypted. */
  private[partition] final case class Decoded(numSubpartitions: Int, numBuffers: Int, fileLength: Long,
      iv: Option[BufferIv], indexFile: ByteBuffer)

  /**
   * The index of the file of partition `id` received into `path`, from what [[encode]] wrote on
   * the executor that wrote the file; `indexFile` is the index file's bytes, which
   * [[PartitionedFile.adopt]] writes beside `path`. Fails with an IOException naming what is wrong
   * when the index is not one of `id`, is malformed, or does not fit the file; the file is left
   * where it is.
   */
  private[partition] def decode(id: ResultPartitionID, path: File, index: Array[Byte]): Decoded = {
    def corrupt(what: String): Nothing =
      throw new IOException(s"The index of migrated partition ($id) for $path is unusable: $what")
    def ends(): Nothing = corrupt(s"it ends early (${index.length} bytes)")
    val in = ByteBuffer.wrap(index)
    if (in.remaining() < EnvelopeSize + HeaderSize) {
      if (in.remaining() >= 4 && in.getInt(0) != MigrationMagic) corrupt("it does not start with Sluice's index magic")
      ends()
    }
    checkEnvelope(in, id, corrupt)
    val indexFile = in.slice()
    if (in.getInt() != Magic) corrupt("its index file does not start with Sluice's index magic")
    val version = in.get()
    if (version != Version) corrupt(s"index file version $version, this Sluice reads version $Version")
    val numSubpartitions = in.getInt()
    if (numSubpartitions <= 0) corrupt(s"$numSubpartitions subpartitions")
    val fileLength = in.getLong()
    val numBuffers = in.getInt()
    val encrypted = in.get()
    if (encrypted != 0 && encrypted != 1) corrupt(s"encryption flag $encrypted")
    val iv = BufferIv(in.getLong(), in.getLong())
    if (numBuffers < 0 || in.remaining() != 4L * (numSubpartitions + 1) + EntrySize.toLong * numBuffers) {
      corrupt(s"$numBuffers buffers of $numSubpartitions subpartitions announced, ${in.remaining()} bytes follow")
    }
    val actual = path.length()
    if (actual != fileLength) corrupt(s"the file has $actual bytes, the index describes $fileLength")
    val entries = in.duplicate().position(in.position() + 4 * (numSubpartitions + 1))
    var from = in.getInt()
    if (from != 0) corrupt(s"its directory starts at entry $from")
    var sp = 0
    while (sp < numSubpartitions) {
      val to = in.getInt()
      if (to < from || to > numBuffers) corrupt(s"subpartition $sp's entries [$from, $to) of $numBuffers")
      var end = 0L
      var e = from
      while (e < to) {
        val offset = entries.getLong()
        val stored = entries.getInt()
        val raw = entries.getInt()
        entries.getInt() // crc
        if (offset < end || stored <= 0 || offset + stored > fileLength || raw < -1 || raw == 0) {
          corrupt(s"buffer $e of subpartition $sp (offset $offset, $stored bytes stored, raw $raw) does not follow " +
            s"the one before (ending at $end) inside the $fileLength-byte file")
        }
        end = offset + stored
        e += 1
      }
      from = to
      sp += 1
    }
    if (from != numBuffers) corrupt(s"its directory ends at entry $from of $numBuffers")
    Decoded(numSubpartitions, numBuffers, fileLength, if (encrypted == 1) Some(iv) else None, indexFile)
  }
}
