package io.sluice.netty

import java.nio.charset.StandardCharsets

import io.netty.buffer.ByteBuf
import io.sluice.netty.NettyMessage.check

/**
 * Why an [[ErrorResponse]] was sent; codes are never reused. `lostData`: whether the producer's
 * data cannot be read (the client then reports a fetch failure, and Spark recomputes the map
 * outputs of that executor) or the server only could not serve the request now, its data intact
 * (the client fails the reading task, and Spark retries it).
 */
sealed abstract class ErrorKind(val code: Byte, val name: String, val lostData: Boolean) {
  override def toString: String = name
}

object ErrorKind {
  case object PartitionNotFound extends ErrorKind(0, "partition not found", true)
  case object ProducerFailed extends ErrorKind(1, "producer failed", true)
  case object ProtocolError extends ErrorKind(2, "protocol error", true)

  /** Anything else that makes the data unreadable (a file that cannot be read, a request too long). */
  case object Other extends ErrorKind(3, "other", true)

  /** The server failed for a reason of its own: an internal error, out of memory or of file descriptors. */
  case object ServerError extends ErrorKind(4, "server error", false)

  /** The server refused the request: its peer holds as many readers as one host may. */
  case object Refused extends ErrorKind(5, "refused", false)

  val all: Seq[ErrorKind] = Seq(PartitionNotFound, ProducerFailed, ProtocolError, Other, ServerError, Refused)

  /** A kind this version does not know (a later server's): read as a failure to read the data, as before kinds 4 and 5. */
  final case class Unknown(override val code: Byte) extends ErrorKind(code, s"unknown kind $code", true)

  def ofCode(code: Byte): ErrorKind = all.find(_.code == code).getOrElse(Unknown(code))
}

/**
 * Server to client: a request failed (`receiverId` set: that channel only) or the whole
 * connection did (`receiverId` empty: the server closes it after this message). `input` is the
 * position, among a MultiPartitionRequest's inputs, of the one the failure concerns (-1: the
 * request as a whole). The texts are cut to [[ErrorResponse.MaxClassNameBytes]] and
 * [[ErrorResponse.MaxMessageBytes]] of UTF-8.
 */
final case class ErrorResponse(receiverId: Option[InputChannelID], kind: ErrorKind, causeClass: String, message: String,
    input: Int = -1) extends NettyMessage {

  private lazy val classBytes = ErrorResponse.utf8(causeClass, ErrorResponse.MaxClassNameBytes)
  private lazy val messageBytes = ErrorResponse.utf8(message, ErrorResponse.MaxMessageBytes)

  override def id: Byte = ErrorResponse.Id
  override def encodedLength: Int = ErrorResponse.FixedLength + classBytes.length + messageBytes.length

  override def encode(buf: ByteBuf): Unit = {
    buf.writeByte(if (receiverId.isDefined) 1 else 0)
    receiverId.getOrElse(InputChannelID(0L, 0L)).writeTo(buf)
    buf.writeByte(kind.code)
    buf.writeInt(input)
    buf.writeShort(classBytes.length)
    buf.writeBytes(classBytes)
    buf.writeShort(messageBytes.length)
    buf.writeBytes(messageBytes)
  }

  def isConnectionWide: Boolean = receiverId.isEmpty
}

object ErrorResponse extends NettyMessage.Type {
  final val Id: Byte = 2
  val MaxClassNameBytes = 256
  val MaxMessageBytes = 4096

  /** Flags, receiver id, kind, input and the two string lengths. */
  val FixedLength: Int = 1 + InputChannelID.Length + 1 + 4 + 2 + 2
  val MaxLength: Int = FixedLength + MaxClassNameBytes + MaxMessageBytes
  override def minBodyLength: Int = FixedLength
  override def maxBodyLength: Int = MaxLength

  /**
   * The error of one channel, from the exception that ended it (naming the input a missing
   * partition or a failed producer was).
   */
  def apply(receiverId: InputChannelID, kind: ErrorKind, cause: Throwable): ErrorResponse =
    ErrorResponse(Some(receiverId), kind, classNameOf(cause), messageOf(cause),
      cause match {
        case p: io.sluice.partition.PartitionNotFoundException => p.input
        case p: io.sluice.partition.ProducerFailedException => p.input
        case _ => -1
      })

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

  override def decode(buf: ByteBuf, bodyLength: Int): ErrorResponse = {
    val flags = buf.readByte()
    val receiver = InputChannelID.readFrom(buf)
    val kind = ErrorKind.ofCode(buf.readByte())
    val input = buf.readInt()
    check(input >= -1, s"ErrorResponse for input $input")
    val classLen = buf.readUnsignedShort()
    check(classLen <= MaxClassNameBytes && FixedLength + classLen <= bodyLength,
      s"ErrorResponse with a $classLen-byte class name in a $bodyLength-byte body")
    val cls = buf.readCharSequence(classLen, StandardCharsets.UTF_8).toString
    val msgLen = buf.readUnsignedShort()
    check(msgLen <= MaxMessageBytes && FixedLength + classLen + msgLen == bodyLength,
      s"ErrorResponse with a $msgLen-byte message and a $classLen-byte class name in a $bodyLength-byte body")
    check((flags & ~1) == 0, s"ErrorResponse with unknown flags 0x${Integer.toHexString(flags & 0xff)}")
    val msg = buf.readCharSequence(msgLen, StandardCharsets.UTF_8).toString
    ErrorResponse(if ((flags & 1) != 0) Some(receiver) else None, kind, cls, msg, input)
  }
}
