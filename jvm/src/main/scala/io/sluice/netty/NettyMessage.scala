package io.sluice.netty

import io.netty.buffer.ByteBuf

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
 * All integers are big-endian. Every message is one small final class in a file of its own, with a
 * fixed id, an [[encodedLength]] (its fields, without any payload), [[encode]] and a `decode` in its
 * companion (a [[NettyMessage.Type]]), as in Spark's network-common; [[NettyMessage.typeOf]] is the
 * one table from id to message. The ids, fields and directions are listed in docs/wire-protocol.md.
 *
 * Messages are immutable, except that a [[PayloadResponse]] carries a payload whose ownership
 * moves with it (to the encoder on the server, to the input channel on the client).
 */
abstract class NettyMessage {
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

  /**
   * One message id as the decoder sees it (Spark's Message.Type); every message's companion is one.
   * The body of a frame is gathered in up to two steps, [[prefixLength]] bytes and then the rest of
   * [[fieldsLength]] (a header whose first bytes tell its length); what follows the fields is a
   * [[PayloadResponse]]'s payload, which the decoder moves without gathering it.
   */
  trait Type {

    /** The message id, never reused. */
    def Id: Byte

    final def name: String = getClass.getSimpleName.stripSuffix("$")

    /** The body lengths a frame of this message may have (a payload included). */
    def minBodyLength: Int
    def maxBodyLength: Int = minBodyLength

    /**
     * Whether the body starts with the receiver id and a peer may build one longer than the frame
     * limit (a long request, a peer with other settings): such a frame then fails that receiver
     * only, with an error naming spark.sluice.network.maxFrameLength, and the connection goes on.
     */
    def receiverIdFirst: Boolean = false

    /** Bytes of the body to gather first. */
    def prefixLength(bodyLength: Int): Int = bodyLength

    /** The fields' whole length, given the first [[prefixLength]] bytes at `prefix`'s reader index. */
    def fieldsLength(prefix: ByteBuf, bodyLength: Int): Int = prefixLength(bodyLength)

    /** Reads the message from its gathered fields (a payload is left to the caller). */
    def decode(fields: ByteBuf, bodyLength: Int): NettyMessage
  }

  /** Every message, by id: the one place decoding dispatches on ids. */
  private val types: IndexedSeq[Type] = IndexedSeq(PartitionRequest, BufferResponse, ErrorResponse,
    CancelPartitionRequest, CloseRequest, AddCredit, EndOfPartition, Ping, Pong, MultiPartitionRequest, PackedBufferResponse)
  types.zipWithIndex.foreach { case (t, i) => require(t.Id == i, s"${t.name} has id ${t.Id}, listed as $i") }

  /** The message of `id`, or null for an unknown id. */
  def typeOf(id: Byte): Type = if (id >= 0 && id < types.size) types(id) else null

  /** Ids the server accepts; the rest only travel from server to client. */
  val ClientToServer: Set[Byte] =
    Set(PartitionRequest.Id, CancelPartitionRequest.Id, CloseRequest.Id, AddCredit.Id, Ping.Id, MultiPartitionRequest.Id)
  val ServerToClient: Set[Byte] =
    Set(BufferResponse.Id, ErrorResponse.Id, EndOfPartition.Id, Pong.Id, PackedBufferResponse.Id)

  def nameOf(id: Byte): String = Option(typeOf(id)).map(_.name).getOrElse(s"unknown message id $id")

  private[netty] def check(condition: Boolean, what: => String): Unit =
    if (!condition) throw new TransportProtocolException(what)
}

/**
 * A server-to-client message whose payload follows its fields unframed ([[BufferResponse]],
 * [[PackedBufferResponse]]). On the client the payload is `data`, the receiver's own buffer, or null
 * when it was discarded because its channel was released.
 */
abstract class PayloadResponse extends NettyMessage {
  def receiverId: InputChannelID
  def payloadSize: Int
  def data: ByteBuf

  /** The whole frame's length, payload included. */
  final def frameLength: Int = NettyMessage.FrameHeaderLength + encodedLength + payloadSize

  /** The same fields with the payload received into `buffer` (null: discarded). */
  def withData(buffer: ByteBuf): PayloadResponse

  /** Releases the payload (a message that will not be sent or delivered). */
  final def releasePayload(): Unit = if (data != null && data.refCnt() > 0) data.release()
}
