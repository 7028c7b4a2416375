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
 * Writes the buffers of a [[PartitionedFile]] (Flink's PartitionedFileWriter): each compressed on
 * its own when that saves space, checksummed (CRC32C of the stored bytes, taken before
 * encryption), encrypted when Spark's I/O encryption is on (each buffer from the file's IV plus
 * its offset, see [[BufferIv]]), gathered in a direct staging buffer and written out in large
 * writes, and entered in the file's [[PartitionedFileIndex]], which [[finish]] writes to the index
 * file at `indexPath`.
 *
 * It holds the file's only write handle, opened CREATE_NEW (a partition never overwrites another's
 * file), until [[finish]] or [[abort]]. The [[PartitionedFile]] it writes checks that writing is
 * still allowed before every call. Producer thread only, but for [[closeChannel]] (any thread).
 *
 * @param encryptor encrypts the stored bytes (Spark's I/O encryption), or None
 * @param fileIv    the file's random IV; buffer at offset `o` is encrypted from `fileIv.plus(o)`
 */
private[partition] final class PartitionedFileWriter(
    path: File,
    indexPath: File,
    index: PartitionedFileIndex,
    codec: Option[BlockCodec],
    encryptor: Option[BufferCipher],
    fileIv: Option[BufferIv]) {
  import PartitionedFileWriter.{returnStaging, takeStaging}

  @volatile private var channel: FileChannel =
    FileChannel.open(path.toPath, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)
  private val iv = fileIv.orNull
  private var cipher: BufferCipher = encryptor.orNull // until finished
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
   * Starts one buffer of at most `maxLength` raw bytes and returns the address of the direct
   * memory to write them to, valid until [[endBuffer]]: a region of the staging buffer itself
   * when stored raw (the bytes are copied once, straight into what goes to disk), or a scratch
   * buffer the codec compresses from into staging.
   */
  def beginBuffer(maxLength: Int): Long = {
    require(maxLength > 0, s"a buffer of $path needs room for at least one byte, not $maxLength")
    begunMax = maxLength
    if (codec.isEmpty) {
      ensureStagingRoom(maxLength)
      begun = staging.position()
      stagingAddress + begun
    } else {
      if (scratch == null || scratch.capacity() < maxLength) {
        if (scratch != null) returnStaging(scratch)
        scratch = takeStaging(maxLength)
        scratchAddress = PlatformDependent.directBufferAddress(scratch)
      }
      begun = 0
      scratchAddress
    }
  }

  /** Ends the buffer begun last: its first `length` bytes are one stored buffer of `subpartition`. */
  def endBuffer(subpartition: Int, length: Int): Unit = {
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
  def writeBuffer(subpartition: Int, src: ByteBuffer, srcAddress: Long, length: Int): Unit = {
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

  /** Appends one buffer of `subpartition` (its readable bytes); the buffer is left untouched. */
  def write(subpartition: Int, data: ByteBuf): Unit = {
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
    if (cipher != null) cipher.encrypt(stagingAddress + at, stored, iv.plus(stagingStart + at))
    index.add(subpartition, stagingStart + at, stored, raw, crc.getValue.toInt)
    staging.position(at + stored)
  }

  /** Makes room for `n` more bytes in staging, writing out what it holds or taking a larger one. */
  private def ensureStagingRoom(n: Int): Unit = {
    if (staging == null) setStaging(takeStaging(n))
    else if (staging.capacity() - staging.position() < n) {
      flushStaging()
      if (staging.capacity() < n) {
        // Segments larger than the staging buffer (spark.sluice.memory.segmentSize > 1m): a bigger one.
        returnStaging(staging)
        setStaging(takeStaging(n))
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

  /**
   * Writes what is staged, closes the write handle and writes the index file, whose bytes it
   * returns; the staging memory goes back either way.
   */
  def finish(): Array[Byte] =
    try {
      flushStaging()
      closeChannel()
      index.writeTo(indexPath, index.totalStored, fileIv)
    } finally returnWriteBuffers()

  /** Stored buffers written so far. */
  def numBuffers: Int = index.size

  /** Bytes written so far (staged ones included). */
  def length: Long = index.totalStored

  /** The producer gave up writing: its staging goes back, the handle is closed. */
  def abort(): Unit = {
    returnWriteBuffers()
    closeChannel()
  }

  private def returnWriteBuffers(): Unit = {
    cipher = null
    if (staging != null) { returnStaging(staging); staging = null; stagingView = null }
    if (scratch != null) { returnStaging(scratch); scratch = null }
  }

  /** Closes the write handle, if still open (any thread: the partition was released). Idempotent. */
  def closeChannel(): Unit = {
    val ch = channel
    channel = null
    if (ch != null) ch.close()
  }
}

private[partition] object PartitionedFileWriter {

  /** Size of the direct staging buffer through which buffers are written in large writes. */
  val StagingSize: Int = 1 << 20

  private val MaxPooledStaging = 16
  private val stagingPool = new ConcurrentLinkedQueue[ByteBuffer]()

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
}
