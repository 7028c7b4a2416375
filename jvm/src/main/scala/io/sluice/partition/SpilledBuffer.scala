package io.sluice.partition

import java.nio.channels.WritableByteChannel

import io.netty.buffer.ByteBuf
import io.netty.channel.FileRegion
import io.netty.util.AbstractReferenceCounted

/**
 * One buffer of a blocking partition as it lies in the partition's file (Flink's
 * FileRegionBuffer): where it is, how long, whether it is compressed (`rawLength` >= 0 is then its
 * decompressed length) and the CRC32C of the stored bytes, which the reader verifies. Immutable.
 */
final class SpilledBuffer(
    file: PartitionFile,
    val offset: Long,
    val storedLength: Int,
    val rawLength: Int,
    val crc: Int) {

  def isCompressed: Boolean = rawLength >= 0

  /** Copies the stored bytes into `target` at its writer index (a local reader's buffer). */
  def readInto(target: ByteBuf): Unit = file.read(offset, storedLength, target)

  /** The stored bytes as a Netty FileRegion: sent to the socket without entering the JVM heap. */
  def toFileRegion: FileRegion = new SpilledBuffer.Region(file, offset, storedLength)

  override def toString: String = s"SpilledBuffer(${file.path.getName}@$offset, $storedLength b, raw $rawLength)"
}

object SpilledBuffer {

  /** A FileRegion over part of a partition file that, unlike Netty's, never closes the file. */
  private final class Region(file: PartitionFile, offset: Long, length: Int)
    extends AbstractReferenceCounted with FileRegion {

    private var done = 0L

    override def position(): Long = 0L
    override def count(): Long = length.toLong
    override def transferred(): Long = done
    @deprecated("Netty's misspelt alias", "4.1") override def transfered(): Long = done

    override def transferTo(target: WritableByteChannel, position: Long): Long = {
      val n = file.transferTo(offset + position, length - position, target)
      if (n > 0) done += n
      n
    }

    override protected def deallocate(): Unit = ()
    override def retain(): FileRegion = { super.retain(); this }
    override def retain(increment: Int): FileRegion = { super.retain(increment); this }
    override def touch(): FileRegion = this
    override def touch(hint: AnyRef): FileRegion = this
  }
}
