package io.sluice.netty

import io.netty.buffer.ByteBuf

/**
 * Client to server: the heartbeat of a connection that reads but has received nothing for a while
 * (see [[ConnectionHeartbeat]]). The server answers with a [[Pong]] echoing `sequenceNumber`.
 */
final case class Ping(sequenceNumber: Long) extends NettyMessage {
  override def id: Byte = Ping.Id
  override def encodedLength: Int = Ping.Length
  override def encode(buf: ByteBuf): Unit = buf.writeLong(sequenceNumber)
}

object Ping extends NettyMessage.Type {
  final val Id: Byte = 7
  val Length: Int = 8
  override def minBodyLength: Int = Length

  override def decode(buf: ByteBuf, bodyLength: Int): Ping = Ping(buf.readLong())
}
