package io.sluice.partition.consumer

import java.util.zip.CRC32C

import scala.util.control.NonFatal

import io.netty.buffer.ByteBuf
import io.sluice.buffer.BlockCodec
import io.sluice.memory.NetworkBuffer
import io.sluice.partition.{BufferCipher, PartitionedFileCipher}

/**
 * Turns a buffer as its producer stored it back into the bytes it wrote (Flink's
 * BufferDecompressor role, with decryption and verification before it): decrypts a spilled buffer
 * of an encrypted partition file in place, verifies the CRC32C the producer took before encrypting
 * (so it also catches a buffer decrypted wrongly), and decompresses a compressed one into the
 * gate's decompression scratch buffer. Every mismatch is a [[CorruptBufferException]] naming the
 * channel. Task thread only: one gate's decoder decodes one buffer at a time, and the previous
 * decompressed buffer must be released before the next is decoded.
 *
 * @param codec      decompresses buffers stored compressed (spark.shuffle.compress)
 * @param fileCipher decrypts spilled buffers of encrypted partition files (spark.io.encryption.enabled)
 */
private[consumer] final class InputBufferDecoder(codec: Option[BlockCodec], fileCipher: Option[PartitionedFileCipher]) {

  private val crc = new CRC32C
  private var decryptor: BufferCipher = _ // taken with the first encrypted buffer
  /** The gate's scratch segment compressed buffers are decompressed into (set when the gate starts). */
  private[consumer] var decompressScratch: NetworkBuffer = _

  def needsDecompressScratch: Boolean = codec.isDefined

  /**
   * The bytes of `next` as written: `next.buffer` itself, or a slice of the scratch buffer (then
   * `next.buffer` is released). On failure `next.buffer` is released and the exception thrown.
   *
   * @param previousNotReleased the error when the scratch buffer is still lent out
   */
  def decode(channel: InputChannel, next: BufferAndAvailability, previousNotReleased: => Exception): ByteBuf = {
    var data = next.buffer
    val size = data.readableBytes()
    if (next.compressed && decompressScratch != null && decompressScratch.refCnt() != 1) {
      data.release()
      throw previousNotReleased
    }
    try {
      if (next.iv != null) decrypt(channel, next, data, size)
      if (next.hasChecksum) verify(channel, next, data, size)
      if (next.compressed) {
        val c = codec.getOrElse(throw new CorruptBufferException(
            s"${channel.description} sent a compressed buffer, but this reader has no codec"))
        if (next.rawLength < 0 || next.rawLength > decompressScratch.capacity()) {
          throw new CorruptBufferException(s"${channel.description} sent a compressed buffer of raw length " +
            s"${next.rawLength}, more than a segment")
        }
        val src = data.nioBuffer(data.readerIndex(), size)
        c.decompress(src, src.position(), size, decompressScratch.nioBuffer(0, decompressScratch.capacity()), 0, next.rawLength)
        val out = decompressScratch.retainedSlice(0, next.rawLength)
        data.release()
        data = out
      }
      data
    } catch {
      case e: CorruptBufferException => data.release(); throw new InputChannelException(channel, e, next.input)
      case NonFatal(e) => // a codec's error on bytes it cannot decode; an OutOfMemoryError is not about them
        data.release()
        throw new InputChannelException(channel,
          new CorruptBufferException(
            s"Could not decompress a buffer of ${channel.description}: $e"), next.input)
      case e: Throwable => data.release(); throw e
    }
  }

  private def decrypt(channel: InputChannel, next: BufferAndAvailability, data: ByteBuf, size: Int): Unit = {
    if (decryptor == null) {
      decryptor = fileCipher.getOrElse(throw new CorruptBufferException(s"${channel.description} sent an encrypted " +
          s"buffer, but this reader has no I/O encryption key (is ${PartitionedFileCipher.EnabledKey} set alike " +
          "for every executor?)")).newBufferCipher()
    }
    try decryptor.decrypt(data, data.readerIndex(), size, next.iv)
    catch {
      case e: java.security.GeneralSecurityException =>
        throw new CorruptBufferException(s"Could not decrypt a buffer of ${channel.description}: $e")
    }
  }

  private def verify(channel: InputChannel, next: BufferAndAvailability, data: ByteBuf, size: Int): Unit = {
    crc.reset()
    crc.update(data.nioBuffer(data.readerIndex(), size))
    if (crc.getValue.toInt != next.crc) {
      throw new CorruptBufferException(s"Checksum mismatch in a buffer of ${channel.description}: stored " +
        s"CRC32C ${Integer.toHexString(next.crc)}, read ${Integer.toHexString(crc.getValue.toInt)} over $size bytes" +
        (if (next.iv != null) " (after decryption)" else ""))
    }
  }
}
