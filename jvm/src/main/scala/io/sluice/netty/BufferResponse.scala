package io.sluice.netty

import io.netty.buffer.ByteBuf
import io.sluice.netty.NettyMessage.check
import io.sluice.partition.BufferIv

/**
 * Server to client: one buffer of a subpartition. The header carries the sender's backlog after
 * this buffer (the receiver asks for that many floating buffers), how the bytes are stored
 * (compressed with `rawLength` bytes when decompressed; a CRC32C when `hasChecksum`; encrypted from
 * `iv` when that is not null, and then the IV's 16 bytes end the header), and the payload size; the
 * payload follows the header unframed. On the server the payload `data` is a retained slice of
 * a pipelined partition's network buffer (stored buffers travel in [[PackedBufferResponse]]s); on
 * the client it is the receiver's own buffer, or null when the payload was discarded because its
 * channel was released.
 */
final case class BufferResponse(
    receiverId: InputChannelID,
    sequenceNumber: Int,
    backlog: Int,
    subpartition: Int,
    compressed: Boolean,
    hasChecksum: Boolean,
    rawLength: Int,
    crc: Int,
    payloadSize: Int,
    iv: BufferIv = null)(val data: ByteBuf) extends PayloadResponse {

  override def id: Byte = BufferResponse.Id
  override def encodedLength: Int = BufferResponse.HeaderLength + (if (iv != null) BufferIv.Length else 0)

  override def encode(buf: ByteBuf): Unit = {
    receiverId.writeTo(buf)
    buf.writeInt(sequenceNumber)
    buf.writeInt(backlog)
    buf.writeInt(subpartition)
    buf.writeByte(
      (if (compressed) 1 else 0) | (if (hasChecksum) 2 else 0) | (if (iv != null) BufferResponse.EncryptedFlag else 0))
    buf.writeInt(rawLength)
    buf.writeInt(crc)
    buf.writeInt(payloadSize)
    if (iv != null) iv.writeTo(buf)
  }

  override def withData(buffer: ByteBuf): BufferResponse = copy()(buffer)
}

object BufferResponse extends NettyMessage.Type {
  final val Id: Byte = 1

  /** The header without an IV (a buffer that is not encrypted). */
  val HeaderLength: Int = InputChannelID.Length + 4 + 4 + 4 + 1 + 4 + 4 + 4
  private val FlagsOffset = InputChannelID.Length + 4 + 4 + 4
  private val EncryptedFlag = 4

  override def minBodyLength: Int = HeaderLength + 1
  override def maxBodyLength: Int = Int.MaxValue
  override def receiverIdFirst: Boolean = true
  override def prefixLength(bodyLength: Int): Int = HeaderLength
  override def fieldsLength(prefix: ByteBuf, bodyLength: Int): Int = {
    val full = headerLength(prefix)
    check(bodyLength > full, s"BufferResponse with a $bodyLength-byte body: no payload after an encrypted buffer's header")
    full
  }

  def apply(receiverId: InputChannelID, sequenceNumber: Int, backlog: Int, subpartition: Int, data: ByteBuf): BufferResponse =
    BufferResponse(receiverId, sequenceNumber, backlog, subpartition, compressed = false, hasChecksum = false,
      rawLength = -1, crc = 0, payloadSize = data.readableBytes())(data)

  /**
   * The whole header's length, given its first [[HeaderLength]] bytes at `buf`'s reader index:
   * [[HeaderLength]], plus the IV's 16 bytes when the flags say the payload is encrypted.
   */
  def headerLength(buf: ByteBuf): Int =
    if ((buf.getByte(buf.readerIndex() + FlagsOffset) & EncryptedFlag) != 0) HeaderLength + BufferIv.Length else HeaderLength

  /** Reads the header (of [[headerLength]] bytes); the payload (the rest of `bodyLength`) is left to the caller. */
  override def decode(buf: ByteBuf, bodyLength: Int): BufferResponse = {
    val receiver = InputChannelID.readFrom(buf)
    val seq = buf.readInt()
    val backlog = buf.readInt()
    val sub = buf.readInt()
    val flags = buf.readByte()
    val raw = buf.readInt()
    val crc = buf.readInt()
    val size = buf.readInt()
    val compressed = (flags & 1) != 0
    check((flags & ~7) == 0, s"BufferResponse with unknown flags 0x${Integer.toHexString(flags & 0xff)}")
    val iv = if ((flags & EncryptedFlag) != 0) BufferIv.readFrom(buf) else null
    val header = HeaderLength + (if (iv != null) BufferIv.Length else 0)
    check(iv == null || (flags & 2) != 0, "BufferResponse with an encrypted payload but no checksum")
    check(seq >= 0 && backlog >= 0 && sub >= 0,
      s"BufferResponse with sequence number $seq, backlog $backlog, subpartition $sub")
    check(if (compressed) raw >= 0 else raw == -1,
      s"BufferResponse with raw length $raw for a ${if (compressed) "" else "not "}compressed buffer")
    check(size > 0 && size == bodyLength - header,
      s"BufferResponse announcing a $size-byte payload in a frame with ${bodyLength - header} payload bytes")
    BufferResponse(receiver, seq, backlog, sub, compressed, (flags & 2) != 0, raw, crc, size, iv)(null)
  }
}
