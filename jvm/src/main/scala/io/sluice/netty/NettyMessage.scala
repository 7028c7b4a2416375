package io.sluice.netty

import java.nio.charset.StandardCharsets

import io.netty.buffer.ByteBuf
import io.sluice.partition.{BufferIv, ResultPartitionID, SpilledBuffer}

/**
 * One message of Sluice's wire protocol (Flink's NettyMessage), framed like this:
 * {{{
 *   +--------------------------------+--------------+-------------------+------------------+
 *   | frame length: int32            | magic: int32 | message id: int8  | body             |
 *   | (the whole frame, these 4      | 0x534C5543   | (never reused)    | (the message's   |
 *   |  bytes included)               | "SLUC"       |                   |  fields, then a  |
 *   |                                |              |                   |  BufferResponse's|
 *   |                                |              |                   |  payload)        |
 *   +--------------------------------+--------------+-------------------+------------------+
 * }}}
 * All integers are big-endian. Every message is one small final class with a fixed id, an
 * [[encodedLength]] (its fields, without any payload), [[encode]] and a `decode` in its companion,
 * as in Spark's network-common. The ids, fields and directions are listed in docs/wire-protocol.md.
 *
 * Messages are immutable, except that a [[BufferResponse]] carries a payload whose ownership
 * moves with it (to the encoder on the server, to the input channel on the client).
 */
sealed abstract class NettyMessage {
  def id: Byte

  /** Bytes of the body after the frame header, without a BufferResponse's payload. */
  def encodedLength: Int

  /** Writes the body (not the frame header, not a payload). */
  def encode(buf: ByteBuf): Unit
}

object NettyMessage {

  /** "SLUC": guards against a peer that speaks another protocol. */
  val Magic: Int = 0x534c5543

  /** Frame length, magic and message id. */
  val FrameHeaderLength: Int = 4 + 4 + 1

  /** Writes the frame header of a frame of `frameLength` bytes in all. */
  def writeFrameHeader(buf: ByteBuf, frameLength: Int, id: Byte): Unit = {
    buf.writeInt(frameLength)
    buf.writeInt(Magic)
    buf.writeByte(id)
  }

  /** The frame of a message without payload, ready to send. */
  def frameOf(message: NettyMessage, buf: ByteBuf): ByteBuf = {
    writeFrameHeader(buf, FrameHeaderLength + message.encodedLength, message.id)
    message.encode(buf)
    buf
  }

  /** Ids the server accepts; the rest only travel from server to client. */
  val ClientToServer: Set[Byte] =
    Set(PartitionRequest.Id, CancelPartitionRequest.Id, CloseRequest.Id, AddCredit.Id, Ping.Id, MultiPartitionRequest.Id)
  val ServerToClient: Set[Byte] =
    Set(BufferResponse.Id, ErrorResponse.Id, EndOfPartition.Id, Pong.Id, PackedBufferResponse.Id)

  def nameOf(id: Byte): String = id match {
    case PartitionRequest.Id => "PartitionRequest"
    case BufferResponse.Id => "BufferResponse"
    case ErrorResponse.Id => "ErrorResponse"
    case CancelPartitionRequest.Id => "CancelPartitionRequest"
    case CloseRequest.Id => "CloseRequest"
    case AddCredit.Id => "AddCredit"
    case EndOfPartition.Id => "EndOfPartition"
    case Ping.Id => "Ping"
    case Pong.Id => "Pong"
    case MultiPartitionRequest.Id => "MultiPartitionRequest"
    case PackedBufferResponse.Id => "PackedBufferResponse"
    case other => s"unknown message id $other"
  }

  private[netty] def check(condition: Boolean, what: => String): Unit =
    if (!condition) throw new TransportProtocolException(what)
}

import NettyMessage.check

/**
 * Client to server: start sending subpartitions [start, end) of a partition to `receiverId`.
 * `credit` is the receiver's exclusive buffers (ignored when `creditBased` is false: the server
 * then sends whenever it has data). With `waitForProducer`, a pipelined partition not registered
 * yet is waited for instead of answered with "partition not found".
 */
final case class PartitionRequest(
    partitionId: ResultPartitionID,
    subpartitionStart: Int,
    subpartitionEnd: Int,
    receiverId: InputChannelID,
    credit: Int,
    creditBased: Boolean,
    waitForProducer: Boolean) extends NettyMessage {

  override def id: Byte = PartitionRequest.Id
  override def encodedLength: Int = PartitionRequest.Length

  override def encode(buf: ByteBuf): Unit = {
    buf.writeInt(partitionId.shuffleId)
    buf.writeLong(partitionId.producerId)
    buf.writeInt(subpartitionStart)
    buf.writeInt(subpartitionEnd)
    receiverId.writeTo(buf)
    buf.writeInt(credit)
    buf.writeByte((if (waitForProducer) 1 else 0) | (if (creditBased) 2 else 0))
  }
}

object PartitionRequest {
  final val Id: Byte = 0
  val Length: Int = 4 + 8 + 4 + 4 + InputChannelID.Length + 4 + 1

  def decode(buf: ByteBuf): PartitionRequest = {
    val shuffle = buf.readInt()
    val producer = buf.readLong()
    val start = buf.readInt()
    val end = buf.readInt()
    val receiver = InputChannelID.readFrom(buf)
    val credit = buf.readInt()
    val flags = buf.readByte()
    check(start >= 0 && end > start, s"PartitionRequest for subpartitions [$start, $end)")
    check(credit >= 0, s"PartitionRequest with credit $credit")
    check((flags & ~3) == 0, s"PartitionRequest with unknown flags 0x${Integer.toHexString(flags & 0xff)}")
    PartitionRequest(ResultPartitionID(shuffle, producer), start, end, receiver, credit,
      creditBased = (flags & 2) != 0, waitForProducer = (flags & 1) != 0)
  }
}

/**
 * Server to client: one buffer of a subpartition. The header carries the sender's backlog after
 * this buffer (the receiver asks for that many floating buffers), how the bytes are stored
 * (compressed with `rawLength` bytes when decompressed; a CRC32C when `hasChecksum`; encrypted from
 * `iv` when that is not null, and then the IV's 16 bytes end the header), and the payload size; the
 * payload follows the header unframed. On the server the payload is either
 * `data` (a retained slice of a network buffer) or `spilled` (a region of a partition file); on
 * the client it is `data`, the receiver's own buffer, or null when the payload was discarded
 * because its channel was released.
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
    iv: BufferIv = null)(val data: ByteBuf, val spilled: SpilledBuffer) extends NettyMessage {

  override def id: Byte = BufferResponse.Id
  override def encodedLength: Int = BufferResponse.HeaderLength + (if (iv != null) BufferIv.Length else 0)

  /** The whole frame's length, payload included. */
  def frameLength: Int = NettyMessage.FrameHeaderLength + encodedLength + payloadSize

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

  /** The same header with the payload received into `buffer` (null: discarded). */
  def withData(buffer: ByteBuf): BufferResponse = copy()(buffer, null)

  /** Releases the payload (a message that will not be sent or delivered). */
  def releasePayload(): Unit = if (data != null && data.refCnt() > 0) data.release()
}

object BufferResponse {
  final val Id: Byte = 1

  /** The header without an IV (a buffer that is not encrypted). */
  val HeaderLength: Int = InputChannelID.Length + 4 + 4 + 4 + 1 + 4 + 4 + 4
  private val FlagsOffset = InputChannelID.Length + 4 + 4 + 4
  private val EncryptedFlag = 4

  def apply(receiverId: InputChannelID, sequenceNumber: Int, backlog: Int, subpartition: Int, data: ByteBuf): BufferResponse =
    BufferResponse(receiverId, sequenceNumber, backlog, subpartition, compressed = false, hasChecksum = false,
      rawLength = -1, crc = 0, payloadSize = data.readableBytes())(data, null)

  def apply(
      receiverId: InputChannelID, sequenceNumber: Int, backlog: Int, subpartition: Int, spilled: SpilledBuffer): BufferResponse =
    BufferResponse(receiverId, sequenceNumber, backlog, subpartition, compressed = spilled.isCompressed,
      hasChecksum = true, rawLength = spilled.rawLength, crc = spilled.crc, payloadSize = spilled.storedLength,
      iv = spilled.iv)(null, spilled)

  /**
   * The whole header's length, given its first [[HeaderLength]] bytes at `buf`'s reader index:
   * [[HeaderLength]], plus the IV's 16 bytes when the flags say the payload is encrypted.
   */
  def headerLength(buf: ByteBuf): Int =
    if ((buf.getByte(buf.readerIndex() + FlagsOffset) & EncryptedFlag) != 0) HeaderLength + BufferIv.Length else HeaderLength

  /** Reads the header (of [[headerLength]] bytes); the payload (the rest of `bodyLength`) is left to the caller. */
  def decodeHeader(buf: ByteBuf, bodyLength: Int): BufferResponse = {
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
    BufferResponse(receiver, seq, backlog, sub, compressed, (flags & 2) != 0, raw, crc, size, iv)(null, null)
  }
}

/** Why an [[ErrorResponse]] was sent; codes are never reused. */
sealed abstract class ErrorKind(val code: Byte, val name: String) {
  override def toString: String = name
}

object ErrorKind {
  case object PartitionNotFound extends ErrorKind(0, "partition not found")
  case object ProducerFailed extends ErrorKind(1, "producer failed")
  case object ProtocolError extends ErrorKind(2, "protocol error")
  case object Other extends ErrorKind(3, "other")

  val all: Seq[ErrorKind] = Seq(PartitionNotFound, ProducerFailed, ProtocolError, Other)

  def ofCode(code: Byte): ErrorKind =
    all.find(_.code == code).getOrElse(throw new TransportProtocolException(s"ErrorResponse of unknown kind $code"))
}

/**
 * Server to client: a request failed (`receiverId` set: that channel only) or the whole
 * connection did (`receiverId` empty: the server closes it after this message). The texts are
 * cut to [[ErrorResponse.MaxClassNameBytes]] and [[ErrorResponse.MaxMessageBytes]] of UTF-8.
 */
final case class ErrorResponse(receiverId: Option[InputChannelID], kind: ErrorKind, causeClass: String, message: String)
  extends NettyMessage {

  private lazy val classBytes = ErrorResponse.utf8(causeClass, ErrorResponse.MaxClassNameBytes)
  private lazy val messageBytes = ErrorResponse.utf8(message, ErrorResponse.MaxMessageBytes)

  override def id: Byte = ErrorResponse.Id
  override def encodedLength: Int = ErrorResponse.FixedLength + classBytes.length + messageBytes.length

  override def encode(buf: ByteBuf): Unit = {
    buf.writeByte(if (receiverId.isDefined) 1 else 0)
    receiverId.getOrElse(InputChannelID(0L, 0L)).writeTo(buf)
    buf.writeByte(kind.code)
    buf.writeShort(classBytes.length)
    buf.writeBytes(classBytes)
    buf.writeShort(messageBytes.length)
    buf.writeBytes(messageBytes)
  }

  def isConnectionWide: Boolean = receiverId.isEmpty
}

object ErrorResponse {
  final val Id: Byte = 2
  val MaxClassNameBytes = 256
  val MaxMessageBytes = 4096

  /** Flags, receiver id, kind and the two string lengths. */
  val FixedLength: Int = 1 + InputChannelID.Length + 1 + 2 + 2
  val MaxLength: Int = FixedLength + MaxClassNameBytes + MaxMessageBytes

  /** The error of one channel, from the exception that ended it. */
  def apply(receiverId: InputChannelID, kind: ErrorKind, cause: Throwable): ErrorResponse =
    ErrorResponse(Some(receiverId), kind, classNameOf(cause), messageOf(cause))

  def connectionWide(kind: ErrorKind, cause: Throwable): ErrorResponse =
    ErrorResponse(None, kind, classNameOf(cause), messageOf(cause))

  private def classNameOf(t: Throwable): String = if (t == null) "" else t.getClass.getName
  private def messageOf(t: Throwable): String = if (t == null || t.getMessage == null) "" else t.getMessage

  /** UTF-8 of `s`, cut to at most `max` bytes without splitting a character. */
  private[netty] def utf8(s: String, max: Int): Array[Byte] = {
    val b = s.getBytes(StandardCharsets.UTF_8)
    if (b.length <= max) b
    else {
      var cut = max
      while (cut > 0 && (b(cut) & 0xc0) == 0x80) cut -= 1
      java.util.Arrays.copyOf(b, cut)
    }
  }

  def decode(buf: ByteBuf, bodyLength: Int): ErrorResponse = {
    val flags = buf.readByte()
    val receiver = InputChannelID.readFrom(buf)
    val kind = ErrorKind.ofCode(buf.readByte())
    val classLen = buf.readUnsignedShort()
    check(classLen <= MaxClassNameBytes && FixedLength + classLen <= bodyLength,
      s"ErrorResponse with a $classLen-byte class name in a $bodyLength-byte body")
    val cls = buf.readCharSequence(classLen, StandardCharsets.UTF_8).toString
    val msgLen = buf.readUnsignedShort()
    check(msgLen <= MaxMessageBytes && FixedLength + classLen + msgLen == bodyLength,
      s"ErrorResponse with a $msgLen-byte message and a $classLen-byte class name in a $bodyLength-byte body")
    check((flags & ~1) == 0, s"ErrorResponse with unknown flags 0x${Integer.toHexString(flags & 0xff)}")
    val msg = buf.readCharSequence(msgLen, StandardCharsets.UTF_8).toString
    ErrorResponse(if ((flags & 1) != 0) Some(receiver) else None, kind, cls, msg)
  }
}

/** Client to server: the receiver went away; release its reader and send nothing more. */
final case class CancelPartitionRequest(receiverId: InputChannelID) extends NettyMessage {
  override def id: Byte = CancelPartitionRequest.Id
  override def encodedLength: Int = InputChannelID.Length
  override def encode(buf: ByteBuf): Unit = receiverId.writeTo(buf)
}

object CancelPartitionRequest {
  final val Id: Byte = 3
  def decode(buf: ByteBuf): CancelPartitionRequest = CancelPartitionRequest(InputChannelID.readFrom(buf))
}

/** Client to server: the client closes the connection; release every reader of it. */
case object CloseRequest extends NettyMessage {
  final val Id: Byte = 4
  override def id: Byte = Id
  override def encodedLength: Int = 0
  override def encode(buf: ByteBuf): Unit = ()
  def decode(buf: ByteBuf): CloseRequest.type = this
}

/** Client to server: the receiver has `credit` more buffers for this channel (1 credit = 1 buffer). */
final case class AddCredit(receiverId: InputChannelID, credit: Int) extends NettyMessage {
  override def id: Byte = AddCredit.Id
  override def encodedLength: Int = AddCredit.Length
  override def encode(buf: ByteBuf): Unit = { receiverId.writeTo(buf); buf.writeInt(credit) }
}

object AddCredit {
  final val Id: Byte = 5
  val Length: Int = InputChannelID.Length + 4

  def decode(buf: ByteBuf): AddCredit = {
    val receiver = InputChannelID.readFrom(buf)
    val credit = buf.readInt()
    check(credit > 0, s"AddCredit of $credit")
    AddCredit(receiver, credit)
  }
}

/** Server to client: the last subpartition of the request has ended; the reader is gone. Needs no credit. */
final case class EndOfPartition(receiverId: InputChannelID, sequenceNumber: Int, subpartition: Int) extends NettyMessage {
  override def id: Byte = EndOfPartition.Id
  override def encodedLength: Int = EndOfPartition.Length
  override def encode(buf: ByteBuf): Unit = {
    receiverId.writeTo(buf)
    buf.writeInt(sequenceNumber)
    buf.writeInt(subpartition)
  }
}

object EndOfPartition {
  final val Id: Byte = 6
  val Length: Int = InputChannelID.Length + 4 + 4

  def decode(buf: ByteBuf): EndOfPartition = {
    val receiver = InputChannelID.readFrom(buf)
    val seq = buf.readInt()
    val sub = buf.readInt()
    check(seq >= 0 && sub >= 0, s"EndOfPartition with sequence number $seq, subpartition $sub")
    EndOfPartition(receiver, seq, sub)
  }
}

/**
 * Client to server: the heartbeat of a connection that reads but has received nothing for a while
 * (see [[ConnectionHeartbeat]]). The server answers with a [[Pong]] echoing `sequenceNumber`.
 */
final case class Ping(sequenceNumber: Long) extends NettyMessage {
  override def id: Byte = Ping.Id
  override def encodedLength: Int = Ping.Length
  override def encode(buf: ByteBuf): Unit = buf.writeLong(sequenceNumber)
}

object Ping {
  final val Id: Byte = 7
  val Length: Int = 8

  def decode(buf: ByteBuf): Ping = Ping(buf.readLong())
}

/** Server to client: the answer to a [[Ping]], carrying its sequence number. Needs no credit. */
final case class Pong(sequenceNumber: Long) extends NettyMessage {
  override def id: Byte = Pong.Id
  override def encodedLength: Int = Pong.Length
  override def encode(buf: ByteBuf): Unit = buf.writeLong(sequenceNumber)
}

object Pong {
  final val Id: Byte = 8
  val Length: Int = 8

  def decode(buf: ByteBuf): Pong = Pong(buf.readLong())
}

/** One input of a [[MultiPartitionRequest]]: subpartitions [start, end) of one result partition. */
final case class RequestedSubpartitions(partitionId: ResultPartitionID, subpartitionStart: Int, subpartitionEnd: Int)

/**
 * Client to server: start sending every listed input (subpartitions of several result partitions of
 * the server's executor, the map outputs one reduce task reads from there) to `receiverId`, one after
 * another, as ONE stream: one reader, one backlog, one credit (FLINK-33743 lets a channel consume a
 * range of subpartitions of one producer; this goes further and spans every producer of the
 * executor). The server answers with [[PackedBufferResponse]]s only, whose entries name the input
 * by its position in `inputs`. Only finished (blocking) partitions can be requested this way.
 */
final case class MultiPartitionRequest(
    receiverId: InputChannelID,
    credit: Int,
    creditBased: Boolean,
    inputs: IndexedSeq[RequestedSubpartitions]) extends NettyMessage {

  override def id: Byte = MultiPartitionRequest.Id
  override def encodedLength: Int = MultiPartitionRequest.FixedLength + inputs.size * MultiPartitionRequest.InputLength

  override def encode(buf: ByteBuf): Unit = {
    receiverId.writeTo(buf)
    buf.writeInt(credit)
    buf.writeByte(if (creditBased) 2 else 0)
    buf.writeInt(inputs.size)
    inputs.foreach { in =>
      buf.writeInt(in.partitionId.shuffleId)
      buf.writeLong(in.partitionId.producerId)
      buf.writeInt(in.subpartitionStart)
      buf.writeInt(in.subpartitionEnd)
    }
  }
}

object MultiPartitionRequest {
  final val Id: Byte = 9

  /** Receiver id, credit, flags and the number of inputs. */
  val FixedLength: Int = InputChannelID.Length + 4 + 1 + 4

  /** Shuffle id, producer id, subpartition start and end of one input. */
  val InputLength: Int = 4 + 8 + 4 + 4

  def decode(buf: ByteBuf, bodyLength: Int): MultiPartitionRequest = {
    val receiver = InputChannelID.readFrom(buf)
    val credit = buf.readInt()
    val flags = buf.readByte()
    val n = buf.readInt()
    check(credit >= 0, s"MultiPartitionRequest with credit $credit")
    check((flags & ~2) == 0, s"MultiPartitionRequest with unknown flags 0x${Integer.toHexString(flags & 0xff)}")
    check(n > 0 && FixedLength.toLong + n.toLong * InputLength == bodyLength,
      s"MultiPartitionRequest of $n inputs in a $bodyLength-byte body")
    val inputs = IndexedSeq.fill(n) {
      val shuffle = buf.readInt()
      val producer = buf.readLong()
      val start = buf.readInt()
      val end = buf.readInt()
      check(start >= 0 && end > start, s"MultiPartitionRequest for subpartitions [$start, $end)")
      RequestedSubpartitions(ResultPartitionID(shuffle, producer), start, end)
    }
    MultiPartitionRequest(receiver, credit, (flags & 2) != 0, inputs)
  }
}

/**
 * One entry of a [[PackedBufferResponse]]: a stored buffer of input `input` (its bytes are the
 * next `length` bytes of the payload; compressed, with a checksum and encrypted exactly as a
 * BufferResponse's), or (`isEnd`, no bytes) the end of that input.
 */
final case class PackedEntry(
    input: Int,
    subpartition: Int,
    isEnd: Boolean,
    compressed: Boolean,
    hasChecksum: Boolean,
    rawLength: Int,
    crc: Int,
    length: Int,
    iv: BufferIv) {

  def encodedLength: Int = PackedEntry.Length + (if (iv != null) BufferIv.Length else 0)
}

object PackedEntry {

  /** Input, subpartition, flags, raw length, CRC32C and length; an IV follows when encrypted. */
  val Length: Int = 4 + 4 + 1 + 4 + 4 + 4
  private val Compressed = 1
  private val Checksum = 2
  private val Encrypted = 4
  private val End = 8

  def end(input: Int, subpartition: Int): PackedEntry =
    PackedEntry(input, subpartition, isEnd = true, compressed = false, hasChecksum = false, -1, 0, 0, null)

  def of(input: Int, spilled: SpilledBuffer, subpartition: Int): PackedEntry =
    PackedEntry(input, subpartition, isEnd = false, spilled.isCompressed, hasChecksum = true, spilled.rawLength,
      spilled.crc, spilled.storedLength, spilled.iv)

  private[netty] def write(e: PackedEntry, buf: ByteBuf): Unit = {
    buf.writeInt(e.input)
    buf.writeInt(e.subpartition)
    buf.writeByte((if (e.compressed) Compressed else 0) | (if (e.hasChecksum) Checksum else 0) |
      (if (e.iv != null) Encrypted else 0) | (if (e.isEnd) End else 0))
    buf.writeInt(e.rawLength)
    buf.writeInt(e.crc)
    buf.writeInt(e.length)
    if (e.iv != null) e.iv.writeTo(buf)
  }

  private[netty] def read(buf: ByteBuf): PackedEntry = {
    val input = buf.readInt()
    val sub = buf.readInt()
    val flags = buf.readByte()
    val raw = buf.readInt()
    val crc = buf.readInt()
    val length = buf.readInt()
    check((flags & ~15) == 0, s"PackedBufferResponse entry with unknown flags 0x${Integer.toHexString(flags & 0xff)}")
    val isEnd = (flags & End) != 0
    val compressed = (flags & Compressed) != 0
    val iv = if ((flags & Encrypted) != 0) BufferIv.readFrom(buf) else null
    check(input >= 0 && sub >= 0, s"PackedBufferResponse entry for input $input, subpartition $sub")
    check(if (isEnd) length == 0 && flags == End else length > 0,
      s"PackedBufferResponse entry of $length bytes with flags 0x${Integer.toHexString(flags & 0xff)}")
    check(if (compressed) raw >= 0 else raw == -1, s"PackedBufferResponse entry with raw length $raw")
    check(iv == null || (flags & Checksum) != 0, "PackedBufferResponse entry encrypted but without a checksum")
    PackedEntry(input, sub, isEnd, compressed, (flags & Checksum) != 0, raw, crc, length, iv)
  }
}

/**
 * Server to client: one credit's worth of a [[MultiPartitionRequest]]'s stream. Many small
 * stored buffers (and the ends of their inputs) travel in one frame and one receiver buffer, as
 * Flink's sort-merge reader packs small regions into one full buffer; the receiver splits the
 * payload again by the entries' lengths. The fields are the receiver id, the sequence number, the
 * backlog (frames still to come, estimated from the bytes left), the length of the entry table, the
 * payload size, then the entries, then the payload: the data entries' bytes, back to back. On the
 * server `spilled` holds the entries' stored buffers (sent as FileRegions); on the client `data` is
 * the receiver's buffer (null when discarded).
 */
final case class PackedBufferResponse(
    receiverId: InputChannelID,
    sequenceNumber: Int,
    backlog: Int,
    entries: IndexedSeq[PackedEntry],
    payloadSize: Int)(val data: ByteBuf, val spilled: IndexedSeq[SpilledBuffer]) extends NettyMessage {

  override def id: Byte = PackedBufferResponse.Id

  private def entriesLength: Int = { var n = 0; entries.foreach(e => n += e.encodedLength); n }

  override def encodedLength: Int = PackedBufferResponse.FixedLength + entriesLength

  def frameLength: Int = NettyMessage.FrameHeaderLength + encodedLength + payloadSize

  override def encode(buf: ByteBuf): Unit = {
    receiverId.writeTo(buf)
    buf.writeInt(sequenceNumber)
    buf.writeInt(backlog)
    buf.writeInt(entriesLength)
    buf.writeInt(payloadSize)
    entries.foreach(PackedEntry.write(_, buf))
  }

  def withData(buffer: ByteBuf): PackedBufferResponse = copy()(buffer, null)

  def releasePayload(): Unit = if (data != null && data.refCnt() > 0) data.release()
}

object PackedBufferResponse {
  final val Id: Byte = 10

  /** Receiver id, sequence number, backlog, entry table length, payload size. */
  val FixedLength: Int = InputChannelID.Length + 4 + 4 + 4 + 4
  private val EntriesLengthOffset = InputChannelID.Length + 4 + 4

  /** Most entries in one frame (bounds the decoder's header buffer). */
  val MaxEntries = 256
  val MaxHeaderLength: Int = FixedLength + MaxEntries * (PackedEntry.Length + BufferIv.Length)

  /** The whole header's length, given its first [[FixedLength]] bytes at `buf`'s reader index. */
  def headerLength(buf: ByteBuf): Int = {
    val entries = buf.getInt(buf.readerIndex() + EntriesLengthOffset)
    check(entries >= PackedEntry.Length && entries <= MaxHeaderLength - FixedLength,
      s"PackedBufferResponse with a $entries-byte entry table")
    FixedLength + entries
  }

  def decodeHeader(buf: ByteBuf, bodyLength: Int): PackedBufferResponse = {
    val receiver = InputChannelID.readFrom(buf)
    val seq = buf.readInt()
    val backlog = buf.readInt()
    val entriesLength = buf.readInt()
    val size = buf.readInt()
    val end = buf.readerIndex() + entriesLength
    val entries = IndexedSeq.newBuilder[PackedEntry]
    var bytes = 0L
    while (buf.readerIndex() < end) {
      val e = PackedEntry.read(buf)
      bytes += e.length
      entries += e
    }
    check(buf.readerIndex() == end, s"PackedBufferResponse whose entries overrun their $entriesLength-byte table")
    check(seq >= 0 && backlog >= 0, s"PackedBufferResponse with sequence number $seq, backlog $backlog")
    check(size >= 0 && bytes == size && size == bodyLength - FixedLength - entriesLength,
      s"PackedBufferResponse announcing a $size-byte payload, entries of $bytes bytes, in a frame with " +
        s"${bodyLength - FixedLength - entriesLength} payload bytes")
    PackedBufferResponse(receiver, seq, backlog, entries.result(), size)(null, null)
  }
}
