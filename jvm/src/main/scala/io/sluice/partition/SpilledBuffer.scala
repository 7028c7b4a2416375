package io.sluice.partition

import io.netty.buffer.ByteBuf

/**
 * One buffer of a blocking partition as it lies in the partition's file (Flink's
 * FileRegionBuffer): where it is, how long, whether it is compressed (`rawLength` >= 0 is then its
 * decompressed length), the CRC32C of the stored bytes (before encryption), which the reader
 * verifies, and the IV it was encrypted from (`iv`, null when the file is not encrypted), with which
 * the reader decrypts it before verifying it.
 *
 * It is read through the [[PartitionedFileReader]] of the view that handed it out while that
 * reader is open, else through a handle opened for this one read: a buffer taken from a view is
 * readable whatever the view did since. Immutable.
 */
final class SpilledBuffer private[partition] (
    private[partition] val file: PartitionedFile,
    reader: PartitionedFileReader,
    val offset: Long,
    val storedLength: Int,
    val rawLength: Int,
    val crc: Int,
    val iv: BufferIv) {

  def isCompressed: Boolean = rawLength >= 0

  def isEncrypted: Boolean = iv != null

  /**
   * Copies the stored bytes into `target` at its writer index (a local reader's buffer, on the
   * task thread). Fails with an IOException when the partition was released or its file cannot be
   * read; an interrupt of the calling thread closes only this reader's handle.
   */
  def readInto(target: ByteBuf): Unit = {
    val r = acquireReader()
    try r.read(offset, storedLength, target)
    finally r.release()
  }

  /** A reference to a reader of the file, which the caller releases. */
  private[partition] def acquireReader(): PartitionedFileReader = {
    file.checkReadable()
    if (reader != null && reader.tryRetain()) reader else PartitionedFileReader.open(file)
  }

  override def toString: String =
    s"SpilledBuffer(${file.path.getName}@$offset, $storedLength b, raw $rawLength${if (iv != null) ", encrypted" else ""})"
}
