package io.sluice.partition

import java.io.{File, IOException}
import java.nio.ByteBuffer
import java.nio.channels.FileChannel
import java.nio.file.StandardOpenOption
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.zip.CRC32C

import io.netty.buffer.ByteBuf
import io.netty.util.internal.PlatformDependent
import io.sluice.buffer.BlockCodec
import org.apache.spark.unsafe.Platform

/**
 * The file of one blocking result partition in Spark's local dirs (Flink's PartitionedFile): its
 * buffers, appended in the order they were written, each compressed on its own when that saves
 * space, checksummed (CRC32C of the stored bytes, taken before encryption), encrypted when Spark's
 * I/O encryption is on (`cipher`: AES/CTR, each buffer from its own [[BufferIv]]), and an in-memory
 * index per subpartition. A subpartition's buffers read back in the order
 * they were written; with a sort-merge writer they come region after region (one region per spill).
 * Buffers are read back as stored: readers decrypt, verify and decompress them (a remote reader's
 * gate does, after they crossed the network as they lie in the file).
 *
 * Only the writer holds a file handle, and only until [[finishWriting]]: a finished partition
 * holds none, however long it lives. Every reader opens its own read-only channel
 * ([[openReader]]), so an interrupted reader (Java NIO closes an interruptible channel when its
 * thread is interrupted) closes nothing but its own.
 *
 * Writing is done by the producer's task thread only; once [[finishWriting]] returns, any number
 * of readers may read concurrently. [[delete]] may come from any thread.
 */
final class PartitionFile private (val path: File, numSubpartitions: Int, codec: Option[BlockCodec],
    cipher: Option[PartitionFileCipher], adopted: PartitionFile.Index, adoptedIv: BufferIv) {

  def this(path: File, numSubpartitions: Int, codec: Option[BlockCodec], cipher: Option[PartitionFileCipher] = None) =
    this(path, numSubpartitions, codec, cipher, null, null)

  // The writer's handle: CREATE_NEW, so a partition never overwrites another's file. An adopted
  // file (see [[PartitionFile.adopt]]) is finished from the start and has no writer.
  @volatile private var channel: FileChannel =
    if (adopted != null) null
    else FileChannel.open(path.toPath, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)
  private val index = if (adopted != null) adopted else new PartitionFile.Index(numSubpartitions)
  private var staging: ByteBuffer = _
  private var stagingView: ByteBuffer = _ // checksums the stored bytes without moving staging's position
  private var stagingAddress = 0L
  private var stagingStart = 0L // file offset of staging's first byte
  private var scratch: ByteBuffer = _ // with a codec: the raw buffer, compressed into staging
  private var scratchAddress = 0L
  private var begun = -1 // where the open buffer starts in staging (no codec), or 0
  private var begunMax = 0
  private val crc = new CRC32C

  /**
   * The file's random IV: buffer at offset `o` is encrypted from `fileIv.plus(o)`. Null: not
   * encrypted. An adopted file keeps the IV it was written with (it travels in its index).
   */
  private val fileIv: BufferIv = if (adopted != null) adoptedIv else cipher.map(_.newFileIv()).orNull
  // the writer's, until finished; an adopted file has no writer
  private var encryptor: BufferCipher = if (adopted != null) null else cipher.map(_.newBufferCipher()).orNull
  @volatile private var finished = adopted != null
  @volatile private var deleted = false

  // ---- writing (producer thread) -------------------------------------------------------------

  /**
   * Starts one buffer of at most `maxLength` raw bytes and returns the address of the direct
   * memory to write them to, valid until [[endBuffer]]: a region of the staging buffer itself
   * when stored raw (the bytes are copied once, straight into what goes to disk), or a scratch
   * buffer the codec compresses from into staging.
   */
  private[partition] def beginBuffer(maxLength: Int): Long = {
    checkWritable()
    require(maxLength > 0, s"a buffer of $path needs room for at least one byte, not $maxLength")
    begunMax = maxLength
    if (codec.isEmpty) {
      ensureStagingRoom(maxLength)
      begun = staging.position()
      stagingAddress + begun
    } else {
      if (scratch == null || scratch.capacity() < maxLength) {
        if (scratch != null) PartitionFile.returnStaging(scratch)
        scratch = PartitionFile.takeStaging(maxLength)
        scratchAddress = PlatformDependent.directBufferAddress(scratch)
      }
      begun = 0
      scratchAddress
    }
  }

  /** Ends the buffer begun last: its first `length` bytes are one stored buffer of `subpartition`. */
  private[partition] def endBuffer(subpartition: Int, length: Int): Unit = {
    if (begun < 0) throw new IllegalStateException(s"no buffer of $path was begun")
    require(length >= 0 && length <= begunMax, s"$length bytes do not fit the $begunMax-byte buffer begun in $path")
    val rawAt = begun
    begun = -1
    if (length == 0) return
    codec match {
      case None => store(subpartition, rawAt, length, -1)
      case Some(c) => compressAndStore(c, subpartition, scratch, scratchAddress, length)
    }
  }

  /**
   * Appends the first `length` bytes of `src`, a direct buffer at `srcAddress` (a network buffer's
   * segment), as one stored buffer of `subpartition`: compressed straight from it, or copied once
   * into staging when stored raw. `src` is left untouched.
   */
  private[partition] def writeBuffer(subpartition: Int, src: ByteBuffer, srcAddress: Long, length: Int): Unit = {
    checkWritable()
    if (begun >= 0) throw new IllegalStateException(s"a buffer of $path is begun and not ended")
    if (length == 0) return
    codec match {
      case None =>
        ensureStagingRoom(length)
        val at = staging.position()
        Platform.copyMemory(null, srcAddress, null, stagingAddress + at, length)
        store(subpartition, at, length, -1)
      case Some(c) => compressAndStore(c, subpartition, src, srcAddress, length)
    }
  }

  /** Compresses `length` raw bytes of `src` into staging and stores them, raw when that saves nothing. */
  private def compressAndStore(c: BlockCodec, subpartition: Int, src: ByteBuffer, srcAddress: Long, length: Int): Unit = {
    ensureStagingRoom(math.max(length, c.maxCompressedLength(length)))
    val at = staging.position()
    val n = c.compress(src, 0, length, staging, at)
    if (n < length) store(subpartition, at, n, length)
    else {
      Platform.copyMemory(null, srcAddress, null, stagingAddress + at, length)
      store(subpartition, at, length, -1)
    }
  }

  /**
   * Makes the `stored` bytes at `at` in staging one buffer of `subpartition` (`raw`: its length
   * before compression, -1 when stored raw): checksums, encrypts and indexes them.
   */
  private def store(subpartition: Int, at: Int, stored: Int, raw: Int): Unit = {
    stagingView.limit(at + stored).position(at)
    crc.reset(); crc.update(stagingView)
    // Checksummed before encryption: the reader's check covers its decryption too (a wrong key or IV fails it).
    if (encryptor != null) encryptor.encrypt(stagingAddress + at, stored, fileIv.plus(stagingStart + at))
    index.add(subpartition, stagingStart + at, stored, raw, crc.getValue.toInt)
    staging.position(at + stored)
  }

  /** Appends one buffer of `subpartition` (its readable bytes); the buffer is left untouched. */
  def write(subpartition: Int, data: ByteBuf): Unit = {
    checkWritable()
    val len = data.readableBytes()
    if (len == 0) return
    val address = beginBuffer(len)
    if (data.hasMemoryAddress) Platform.copyMemory(null, data.memoryAddress() + data.readerIndex(), null, address, len)
    else {
      val bytes = new Array[Byte](len)
      data.getBytes(data.readerIndex(), bytes)
      Platform.copyMemory(bytes, Platform.BYTE_ARRAY_OFFSET, null, address, len)
    }
    endBuffer(subpartition, len)
  }

  /** Makes room for `n` more bytes in staging, writing out what it holds or taking a larger one. */
  private def ensureStagingRoom(n: Int): Unit = {
    if (staging == null) setStaging(PartitionFile.takeStaging(n))
    else if (staging.capacity() - staging.position() < n) {
      flushStaging()
      if (staging.capacity() < n) {
        // Segments larger than the staging buffer (spark.sluice.memory.segmentSize > 1m): a bigger one.
        PartitionFile.returnStaging(staging)
        setStaging(PartitionFile.takeStaging(n))
      }
    }
  }

  private def setStaging(b: ByteBuffer): Unit = {
    staging = b
    stagingView = b.duplicate()
    stagingAddress = PlatformDependent.directBufferAddress(b)
  }

  private def flushStaging(): Unit = if (staging != null && staging.position() > 0) {
    val n = staging.position()
    staging.flip()
    val ch = channel
    if (ch == null) throw new IOException(s"$path was released while being written")
    while (staging.hasRemaining) ch.write(staging)
    staging.clear()
    stagingStart += n
  }

  /** Writes what is staged, closes the writer's handle and opens the file for readers. */
  def finishWriting(): Unit = if (!finished) {
    checkWritable()
    try {
      flushStaging()
      val ch = channel
      if (ch != null) ch.close()
      channel = null
      index.trim()
      finished = true
    } finally returnWriteBuffers()
  }

  /** The producer gave up writing (producer thread): its staging goes back, its handle is closed. */
  def abortWriting(): Unit = if (!finished) {
    returnWriteBuffers()
    closeWriter()
  }

  private def returnWriteBuffers(): Unit = {
    encryptor = null
    if (staging != null) { PartitionFile.returnStaging(staging); staging = null; stagingView = null }
    if (scratch != null) { PartitionFile.returnStaging(scratch); scratch = null }
  }

  private def checkWritable(): Unit = {
    if (finished) throw new IllegalArgumentException(s"$path is already complete")
    if (deleted) throw new IOException(s"$path was released while being written")
  }

  // ---- reading (any thread, once finished) ---------------------------------------------------

  def isFinished: Boolean = finished

  def isDeleted: Boolean = deleted

  def numBuffers(subpartition: Int): Int = index.counts(subpartition)

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
    val offset = index.offsets(buffer)
    new SpilledBuffer(this, reader, offset, index.stored(buffer), index.raw(buffer), index.crcs(buffer),
      if (fileIv == null) null else fileIv.plus(offset))
  }

  /** Whether the buffers are stored encrypted (Spark's I/O encryption). */
  def isEncrypted: Boolean = fileIv != null

  /** The IV the file was encrypted from (see [[BufferIv]]), when it is encrypted. */
  private[partition] def iv: Option[BufferIv] = Option(fileIv)

  /** Stored (possibly compressed) bytes of one subpartition: what MapStatus reports. */
  def storedBytes(subpartition: Int): Long = index.storedBytes(subpartition)

  /** The finished file's index, for [[PartitionFileIndex]] (immutable once finished). */
  private[partition] def finishedIndex: PartitionFile.Index = {
    checkReadable()
    index
  }

  /** Bytes of the file. */
  def size: Long = index.totalStored

  /** Stored buffers of the file, all subpartitions together. */
  def numBuffersTotal: Int = index.size

  /**
   * Opens a read-only handle of the file for one reader (reference count 1). Fails with an
   * IOException when the file is not complete, was released, or cannot be opened.
   */
  def openReader(): PartitionFileReader = {
    checkReadable()
    val reader = new PartitionFileReader(this, FileChannel.open(path.toPath, StandardOpenOption.READ))
    if (deleted) { reader.release(); checkReadable() } // released while opening: no handle stays
    reader
  }

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
      try closeWriter()
      finally path.delete()
    }
  }

  private def closeWriter(): Unit = {
    val ch = channel
    channel = null
    if (ch != null) ch.close()
  }

  override def toString: String = s"PartitionFile($path)"
}

object PartitionFile {

  /** Size of the direct staging buffer through which buffers are written in large writes. */
  val StagingSize: Int = 1 << 20

  private val MaxPooledStaging = 16
  private val stagingPool = new ConcurrentLinkedQueue[ByteBuffer]()

  /**
   * A finished file another executor wrote, moved into `path` with its index (decommissioning,
   * see [[PartitionFileIndex]]): readable at once, never written.
   */
  private[partition] def adopt(path: File, index: Index, iv: Option[BufferIv]): PartitionFile = {
    index.trim()
    new PartitionFile(path, index.numSubpartitions, None, None, index, iv.orNull)
  }

  private def takeStaging(atLeast: Int): ByteBuffer =
    if (atLeast > StagingSize) ByteBuffer.allocateDirect(atLeast)
    else {
      val b = stagingPool.poll()
      if (b != null) b else ByteBuffer.allocateDirect(StagingSize)
    }

  private def returnStaging(b: ByteBuffer): Unit = {
    b.clear()
    if (b.capacity() == StagingSize && stagingPool.size < MaxPooledStaging) stagingPool.add(b)
  }

  /**
   * Where every stored buffer lies (offset, stored and raw length, CRC32C), numbered in file
   * order, and each subpartition's buffers as a chain through those numbers. Its size grows with
   * the buffers written, plus 24 bytes per subpartition: a map output with thousands of reduce
   * partitions stays small however long it lives.
   */
  private[partition] final class Index(val numSubpartitions: Int) {
    val first: Array[Int] = Array.fill(numSubpartitions)(-1)
    private val last = Array.fill(numSubpartitions)(-1)
    val counts = new Array[Int](numSubpartitions)
    val storedBytes = new Array[Long](numSubpartitions)
    var offsets = new Array[Long](64)
    var stored = new Array[Int](64)
    var raw = new Array[Int](64)
    var crcs = new Array[Int](64)
    var next = new Array[Int](64)
    var size = 0
    var totalStored = 0L

    def add(subpartition: Int, offset: Long, storedLen: Int, rawLen: Int, crc: Int): Unit = {
      if (size == offsets.length) resize(size * 2)
      offsets(size) = offset; stored(size) = storedLen; raw(size) = rawLen; crcs(size) = crc; next(size) = -1
      if (last(subpartition) < 0) first(subpartition) = size else next(last(subpartition)) = size
      last(subpartition) = size
      counts(subpartition) += 1
      storedBytes(subpartition) += storedLen
      totalStored += storedLen
      size += 1
    }

    /** Drops the arrays' slack once no buffer will be added. */
    def trim(): Unit = if (size < offsets.length) resize(size)

    private def resize(n: Int): Unit = {
      offsets = java.util.Arrays.copyOf(offsets, n)
      stored = java.util.Arrays.copyOf(stored, n)
      raw = java.util.Arrays.copyOf(raw, n)
      crcs = java.util.Arrays.copyOf(crcs, n)
      next = java.util.Arrays.copyOf(next, n)
    }
  }
}
