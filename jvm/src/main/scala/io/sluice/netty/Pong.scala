package io.sluice.netty

import io.netty.buffer.ByteBuf

/** Server to client: the answer to a [[Ping]], carrying its sequence number. Needs no credit. */
final case class Pong(sequenceNumber: Long) extends NettyMessage {
  override def id: Byte = Pong.Id
  override def encodedLength: Int = Pong.Length
  override def encode(buf: ByteBuf): Unit = buf.writeLong(sequenceNumber)
}

object Pong extends NettyMessage.Type {
  final val Id: Byte = 8
  val Length: Int = 8
  override def minBodyLength: Int = Length

  override def decode(buf: ByteBuf, bodyLength: Int): Pong = Pong(buf.readLong())
}
