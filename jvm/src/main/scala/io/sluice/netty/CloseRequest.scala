package io.sluice.netty

import io.netty.buffer.ByteBuf

/** Client to server: the client closes the connection; release every reader of it. */
case object CloseRequest extends NettyMessage with NettyMessage.Type {
  final val Id: Byte = 4
  override def id: Byte = Id
  override def encodedLength: Int = 0
  override def encode(buf: ByteBuf): Unit = ()
  override def minBodyLength: Int = 0
  override def decode(buf: ByteBuf, bodyLength: Int): CloseRequest.type = this
}
