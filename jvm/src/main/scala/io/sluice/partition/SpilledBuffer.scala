package io.sluice.partition

import java.nio.channels.WritableByteChannel

import io.netty.buffer.ByteBuf
import io.netty.channel.FileRegion
import io.netty.util.AbstractReferenceCounted

/**
 * One buffer of a blocking partition as it lies in the partition's file (Flink's
 * FileRegionBuffer): where it is, how long, whether it is compressed (`rawLength` >= 0 is then its
 * decompressed length), the CRC32C of the stored bytes (before encryption), which the reader
 * verifies, and the IV it was encrypted from (`iv`, null when the file is not encrypted), with which
 * the reader decrypts it before verifying it.
 *
 * It is read through the [[PartitionFileReader]] of the view that handed it out while that
 * reader is open, else through a handle opened for this one read: a buffer taken from a view is
 * readable whatever the view did since. Immutable.
 */
final class SpilledBuffer private[partition] (
    file: PartitionFile,
    reader: PartitionFileReader,
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
    try r.read(offset, storedLength, target) finally r.release()
  }

  /**
   * The stored bytes as a Netty FileRegion. The region holds a reference to the file's reader
   * until Netty releases it. Over Netty's NIO transport the JDK sends it with sendfile; Netty's
   * epoll transport uses sendfile only for a DefaultFileRegion, so there the JDK copies this
   * region through an 8 KiB heap buffer per transfer (docs/benchmarks.md, "The blocking path is
   * not zero-copy on epoll").
   */
  def toFileRegion: FileRegion = new SpilledBuffer.Region(acquireReader(), offset, storedLength)

  /** A reference to a reader of the file, which the caller releases. */
  private def acquireReader(): PartitionFileReader = {
    file.checkReadable()
    if (reader != null && reader.tryRetain()) reader else file.openReader()
  }

  override def toString: String =
    s"SpilledBuffer(${file.path.getName}@$offset, $storedLength b, raw $rawLength${if (iv != null) ", encrypted" else ""})"
}

object SpilledBuffer {

  /**
   * A FileRegion over part of a partition file. Unlike Netty's DefaultFileRegion it does not own
   * the channel: it holds a reference to its [[PartitionFileReader]] and drops it when Netty
   * releases the region (sent, or discarded with a closed connection).
   */
  private final class Region(reader: PartitionFileReader, offset: Long, length: Int)
    extends AbstractReferenceCounted with FileRegion {

    private var done = 0L

    override def position(): Long = 0L
    override def count(): Long = length.toLong
    override def transferred(): Long = done
    @deprecated("Netty's misspelt alias", "4.1") override def transfered(): Long = done

    override def transferTo(target: WritableByteChannel, position: Long): Long = {
      val n = reader.transferTo(offset + position, length - position, target)
      if (n > 0) done += n
      n
    }

    override protected def deallocate(): Unit = reader.release()
    override def retain(): FileRegion = { super.retain(); this }
    override def retain(increment: Int): FileRegion = { super.retain(increment); this }
    override def touch(): FileRegion = this
    override def touch(hint: AnyRef): FileRegion = this
  }
}
