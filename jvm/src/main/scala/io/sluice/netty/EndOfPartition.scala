package io.sluice.netty

import io.netty.buffer.ByteBuf
import io.sluice.netty.NettyMessage.check

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

object EndOfPartition extends NettyMessage.Type {
  final val Id: Byte = 6
  val Length: Int = InputChannelID.Length + 4 + 4
  override def minBodyLength: Int = Length

  override def decode(buf: ByteBuf, bodyLength: Int): EndOfPartition = {
    val receiver = InputChannelID.readFrom(buf)
    val seq = buf.readInt()
    val sub = buf.readInt()
    check(seq >= 0 && sub >= 0, s"EndOfPartition with sequence number $seq, subpartition $sub")
    EndOfPartition(receiver, seq, sub)
  }
}
