package io.sluice.netty

import io.netty.buffer.ByteBuf
import io.netty.channel.ChannelHandler.Sharable
import io.netty.channel.{ChannelHandlerContext, ChannelOutboundHandlerAdapter, ChannelPromise}

/**
 * Turns [[NettyMessage]]s into frames (the encoding half of Flink's NettyMessageEncoder). A
 * payload is never copied into the frame: a BufferResponse's network buffer and a
 * PackedBufferResponse's payload (read from the partition files by the server's read threads, so
 * the event loop never touches a disk) go out as a composite of a small header buffer and the
 * payload. Stateless and shared by every connection.
 */
@Sharable
private[netty] final class NettyMessageEncoder extends ChannelOutboundHandlerAdapter {

  override def write(ctx: ChannelHandlerContext, msg: AnyRef, promise: ChannelPromise): Unit = msg match {
    case r: BufferResponse => writeInMemory(ctx, r, promise)
    case r: PackedBufferResponse => writeInMemory(ctx, r, promise)
    case m: NettyMessage =>
      val buf = ctx.alloc().buffer(NettyMessage.FrameHeaderLength + m.encodedLength)
      ctx.write(NettyMessage.frameOf(m, buf), promise)
    case other => ctx.write(other, promise)
  }

  /** The frame's fields into a new buffer with room for `payload` more bytes after them. */
  private def header(ctx: ChannelHandlerContext, m: PayloadResponse, payload: Int): ByteBuf = {
    val buf = ctx.alloc().directBuffer(NettyMessage.FrameHeaderLength + m.encodedLength + payload)
    NettyMessage.writeFrameHeader(buf, m.frameLength, m.id)
    m.encode(buf)
    buf
  }

  /** An in-memory payload (null: none): a composite of the header and the payload, nothing copied. */
  private def writeInMemory(ctx: ChannelHandlerContext, r: PayloadResponse, promise: ChannelPromise): Unit = {
    var payload: ByteBuf = r.data
    try {
      val h = header(ctx, r, 0)
      if (payload == null) { ctx.write(h, promise); return }
      val frame = ctx.alloc().compositeDirectBuffer(2)
      frame.addComponents(true, h, payload)
      payload = null
      ctx.write(frame, promise)
    } catch {
      case e: Throwable =>
        if (payload != null) payload.release()
        promise.tryFailure(e)
    }
  }
}
