package io.sluice.netty

import io.netty.buffer.ByteBuf
import io.sluice.netty.NettyMessage.check

/** Client to server: the receiver has `credit` more buffers for this channel (1 credit = 1 buffer). */
final case class AddCredit(receiverId: InputChannelID, credit: Int) extends NettyMessage {
  override def id: Byte = AddCredit.Id
  override def encodedLength: Int = AddCredit.Length
  override def encode(buf: ByteBuf): Unit = { receiverId.writeTo(buf); buf.writeInt(credit) }
}

object AddCredit extends NettyMessage.Type {
  final val Id: Byte = 5
  val Length: Int = InputChannelID.Length + 4
  override def minBodyLength: Int = Length

  override def decode(buf: ByteBuf, bodyLength: Int): AddCredit = {
    val receiver = InputChannelID.readFrom(buf)
    val credit = buf.readInt()
    check(credit > 0, s"AddCredit of $credit")
    AddCredit(receiver, credit)
  }
}
