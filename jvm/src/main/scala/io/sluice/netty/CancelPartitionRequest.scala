package io.sluice.netty

import io.netty.buffer.ByteBuf

/** Client to server: the receiver went away; release its reader and send nothing more. */
final case class CancelPartitionRequest(receiverId: InputChannelID) extends NettyMessage {
  override def id: Byte = CancelPartitionRequest.Id
  override def encodedLength: Int = InputChannelID.Length
  override def encode(buf: ByteBuf): Unit = receiverId.writeTo(buf)
}

object CancelPartitionRequest extends NettyMessage.Type {
  final val Id: Byte = 3
  override def minBodyLength: Int = InputChannelID.Length

  override def decode(buf: ByteBuf, bodyLength: Int): CancelPartitionRequest =
    CancelPartitionRequest(InputChannelID.readFrom(buf))
}
