package io.sluice.netty

import io.netty.buffer.ByteBuf
import io.netty.channel.ChannelHandler.Sharable
import io.netty.channel.{ChannelHandlerContext, ChannelOutboundHandlerAdapter, ChannelPromise}

/**
 * Turns [[NettyMessage]]s into frames (the encoding half of Flink's NettyMessageEncoder). A
 * payload is never copied into the frame: a BufferResponse's network buffer and a
 * PackedBufferResponse's payload (read from the partition files by the server's read threads, so
 * the event loop never touches a disk) follow a small header buffer as a write of their own, as
 * Flink's BufferResponse writes them (no composite buffer per frame; the channel gathers both in
 * one system call). Stateless and shared by every connection; runs on the channel's event loop.
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

  /** The frame's fields (all but its payload) into a new buffer. */
  private def header(ctx: ChannelHandlerContext, m: PayloadResponse): ByteBuf = {
    val buf = ctx.alloc().directBuffer(NettyMessage.FrameHeaderLength + m.encodedLength)
    NettyMessage.writeFrameHeader(buf, m.frameLength, m.id)
    m.encode(buf)
    buf
  }

  /**
   * An in-memory payload (null: none) after its header, nothing copied: the header's write has no
   * promise of its own (a failed one fails the connection, so the payload's write fails too).
   */
  private def writeInMemory(ctx: ChannelHandlerContext, r: PayloadResponse, promise: ChannelPromise): Unit = {
    var payload: ByteBuf = r.data
    try {
      val h = header(ctx, r)
      if (payload == null) { ctx.write(h, promise); return }
      ctx.write(h, ctx.voidPromise())
      val p = payload
      payload = null
      ctx.write(p, promise)
    } catch {
      case e: Throwable =>
        if (payload != null) payload.release()
        promise.tryFailure(e)
    }
  }
}
