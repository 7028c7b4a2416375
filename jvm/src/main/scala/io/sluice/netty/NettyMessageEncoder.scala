package io.sluice.netty

import scala.util.control.NonFatal

import io.netty.buffer.ByteBuf
import io.netty.channel.ChannelHandler.Sharable
import io.netty.channel.{ChannelHandlerContext, ChannelOutboundHandlerAdapter, ChannelPromise, FileRegion}
import io.netty.handler.ssl.SslHandler
import io.sluice.partition.SpilledBuffer

/**
 * Turns [[NettyMessage]]s into frames (the encoding half of Flink's NettyMessageEncoder). A
 * payload is never copied into the frame when it is in memory: a BufferResponse's network buffer
 * and a PackedBufferResponse's payload (read from the partition files by the server's read
 * threads) go out as a composite of a small header buffer and the payload. A BufferResponse's
 * spilled payload (a single partition's reader) goes out as the header followed by a FileRegion of
 * the partition file (sendfile), except behind TLS, which cannot encrypt a FileRegion, where the
 * region is read into the frame first. A spilled payload whose file cannot be opened or read
 * before its frame starts fails only its own write, with an [[UnreadablePayloadException]], and
 * nothing of its frame is sent. Once the header is out the payload must follow byte for byte, so a
 * file that fails mid-payload (a disk error, a file cut short) fails the write and the connection,
 * as Flink does: every reader on it then fails and Spark recomputes. Stateless and shared by every
 * connection.
 */
@Sharable
private[netty] final class NettyMessageEncoder extends ChannelOutboundHandlerAdapter {

  override def write(ctx: ChannelHandlerContext, msg: AnyRef, promise: ChannelPromise): Unit = msg match {
    case r: BufferResponse => writeBufferResponse(ctx, r, promise)
    case r: PackedBufferResponse => writeInMemory(ctx, r, promise)
    case m: NettyMessage =>
      val buf = ctx.alloc().buffer(NettyMessage.FrameHeaderLength + m.encodedLength)
      ctx.write(NettyMessage.frameOf(m, buf), promise)
    case other => ctx.write(other, promise)
  }

  private def writeBufferResponse(ctx: ChannelHandlerContext, r: BufferResponse, promise: ChannelPromise): Unit =
    if (r.data != null) writeInMemory(ctx, r, promise)
    else if (behindTls(ctx)) writeCopied(ctx, r, r.spilled, promise)
    else writeHeaderThenRegion(ctx, r, r.spilled, promise)

  /** TLS cannot encrypt a FileRegion. */
  private def behindTls(ctx: ChannelHandlerContext): Boolean = ctx.pipeline().get(classOf[SslHandler]) != null

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

  /**
   * The header, then `stored` (null: none) as a FileRegion of its file, sent with sendfile. The
   * file is opened before the header is written, so one that cannot be opened fails only this
   * frame's reader ([[UnreadablePayloadException]]).
   */
  private def writeHeaderThenRegion(ctx: ChannelHandlerContext, m: PayloadResponse, stored: SpilledBuffer,
      promise: ChannelPromise): Unit = {
    var region: FileRegion = null
    try {
      if (stored != null) {
        try region = stored.toFileRegion
        catch { case NonFatal(e) => throw new UnreadablePayloadException(m.receiverId, e, m.payloadSize.toLong) }
      }
      val h = header(ctx, m, 0)
      if (region == null) ctx.write(h, promise)
      else {
        ctx.write(h)
        val sending = region
        region = null
        ctx.write(sending, promise)
      }
    } catch {
      case e: Throwable =>
        if (region != null) region.release()
        promise.tryFailure(e)
    }
  }

  /**
   * Header and payload in one buffer, the stored buffer read into it with one positional read, then
   * one write (behind TLS). Nothing is sent unless the stored buffer was read.
   */
  private def writeCopied(ctx: ChannelHandlerContext, m: PayloadResponse, stored: SpilledBuffer,
      promise: ChannelPromise): Unit = {
    var frame: ByteBuf = null
    try {
      frame = header(ctx, m, m.payloadSize)
      try stored.readInto(frame)
      catch { case NonFatal(e) => throw new UnreadablePayloadException(m.receiverId, e, m.payloadSize.toLong) }
      val f = frame
      frame = null
      ctx.write(f, promise)
    } catch {
      case e: Throwable =>
        if (frame != null) frame.release()
        promise.tryFailure(e)
    }
  }
}
