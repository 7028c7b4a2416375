package io.sluice.partition

import java.io.IOException

import io.netty.buffer.ByteBuf

/**
 * One reader's cursor over subpartitions [start, end) of a finished map output in Spark's fallback
 * storage ([[FallbackStorage]]), the fallback storage's counterpart of a [[BlockingSubpartitionView]]:
 * [[FallbackPartitionReader.open]] opens the copied index and data file, checks that the index's
 * envelope names the partition and that its header describes the copied data file, and reads the
 * range's entries (two positioned reads, as [[PartitionedFileIndexRange]] reads a local index).
 * The range's stored buffers then come one by one, in the order written, each with one positioned
 * read of the data file, as stored: the reader's gate decrypts, verifies and decompresses them
 * like a local channel's. The fields describe the next buffer until [[readNext]] has read it.
 * One task thread; [[close]] closes both handles.
 */
final class FallbackPartitionReader private (
    id: ResultPartitionID,
    data: StoredFile,
    entries: PartitionedFileIndexRange,
    fileLength: Long,
    fileIv: Option[BufferIv],
    start: Int) extends java.io.Closeable {

  private var next = 0 // the next entry of `entries` to read
  private var current = start // the subpartition of the next entry, once hasNext

  if (entries.size > 0) current = entries.subpartitionOf(0, start)

  /** Whether a buffer of the range is left to read. */
  def hasNext: Boolean = next < entries.size

  /** Stored bytes of the next buffer. */
  def storedLength: Int = entries.storedLength(next)

  /** Length of the next buffer before compression, -1 when it is stored raw. */
  def rawLength: Int = entries.rawLength(next)

  /** CRC32C of the next buffer as stored (before encryption). */
  def crc: Int = entries.crc(next)

  /** The subpartition the next buffer belongs to. */
  def subpartition: Int = current

  /** The IV the next buffer was encrypted from, null when the file is not encrypted. */
  def iv: BufferIv = fileIv match {
    case Some(v) => v.plus(entries.offset(next))
    case None => null
  }

  /**
   * Reads the next buffer's stored bytes into `target` at its writer index, which it advances,
   * and moves on. An IOException naming the data file when the entry lies outside it or the read
   * fails.
   */
  def readNext(target: ByteBuf): Unit = {
    val offset = entries.offset(next)
    val length = entries.storedLength(next)
    if (offset < 0 || length <= 0 || offset + length > fileLength) {
      throw new IOException(s"The index of partition ($id) in the fallback storage puts buffer $next of " +
        s"subpartition $current at $offset (+$length), outside its $fileLength-byte data file $data")
    }
    data.readFully(offset, target.nioBuffer(target.writerIndex(), length))
    target.writerIndex(target.writerIndex() + length)
    next += 1
    if (next < entries.size) current = entries.subpartitionOf(next, current)
  }

  override def close(): Unit = data.close()

  override def toString: String = s"FallbackPartitionReader($id, $data, $next of ${entries.size})"
}

object FallbackPartitionReader {

  /**
   * Opens subpartitions [start, end) of partition `id` in `storage`; an IOException naming the
   * file when either is missing, unreadable or not the partition's, or the index does not
   * describe the data file. Leaves no handle open when it fails.
   */
  def open(storage: FallbackStorage, id: ResultPartitionID, start: Int, end: Int): FallbackPartitionReader = {
    val index = storage.openIndex(id)
    var data: StoredFile = null
    try {
      data = storage.openData(id)
      val header = PartitionedFileIndex.readEnvelopedHeader(id, index, data.length)
      if (start < 0 || end > header.numSubpartitions || start >= end) {
        throw new IOException(s"Partition ($id) in the fallback storage has ${header.numSubpartitions} " +
          s"subpartitions, not [$start, $end) ($index)")
      }
      val entries = PartitionedFileIndexRange.read(index, PartitionedFileIndex.EnvelopeSize.toLong,
        header.numSubpartitions, header.numBuffers, start, end)
      val reader = new FallbackPartitionReader(id, data, entries, header.fileLength, header.iv, start)
      data = null
      reader
    } finally {
      index.close()
      if (data != null) data.close()
    }
  }
}
