package io.sluice.netty

import scala.util.control.NonFatal

import io.netty.buffer.ByteBuf
import io.netty.channel.ChannelHandler.Sharable
import io.netty.channel.{ChannelHandlerContext, ChannelOutboundHandlerAdapter, ChannelPromise, FileRegion}
import io.netty.handler.ssl.SslHandler

/**
 * Turns [[NettyMessage]]s into frames (the encoding half of Flink's NettyMessageEncoder). A
 * BufferResponse's payload is never copied into the frame: an in-memory payload goes out as a
 * composite of a small header buffer and the payload slice, a spilled one as the header followed
 * by a FileRegion of the partition file (sendfile), except behind TLS, which cannot encrypt a
 * FileRegion, where the region is read into a buffer first. A spilled payload whose file cannot be
 * opened or read before its frame starts fails only its own write, with an
 * [[UnreadablePayloadException]], and nothing of its frame is sent. Once the header is out the
 * payload must follow byte for byte, so a file that fails mid-payload (a disk error, a file cut
 * short) fails the write and the connection, as Flink does: every reader on it then fails and
 * Spark recomputes. A PackedBufferResponse of one stored buffer goes out the same way; one that
 * packs several is read, header and payload, into one buffer and written at once, so nothing of it
 * is sent unless all of it could be read. Stateless and shared by every connection.
 */
@Sharable
private[netty] final class NettyMessageEncoder extends ChannelOutboundHandlerAdapter {

  override def write(ctx: ChannelHandlerContext, msg: AnyRef, promise: ChannelPromise): Unit = msg match {
    case r: BufferResponse => writeBufferResponse(ctx, r, promise)
    case r: PackedBufferResponse => writePackedBufferResponse(ctx, r, promise)
    case m: NettyMessage =>
      val buf = ctx.alloc().buffer(NettyMessage.FrameHeaderLength + m.encodedLength)
      ctx.write(NettyMessage.frameOf(m, buf), promise)
    case other => ctx.write(other, promise)
  }

  private def writeBufferResponse(ctx: ChannelHandlerContext, r: BufferResponse, promise: ChannelPromise): Unit = {
    var header: ByteBuf = null
    var payload: ByteBuf = r.data
    var region: FileRegion = null
    try {
      if (payload == null && r.spilled != null) {
        // Anything the file throws here fails this buffer's reader before a byte of its frame is out.
        try {
          if (ctx.pipeline().get(classOf[SslHandler]) != null) {
            payload = ctx.alloc().directBuffer(r.payloadSize)
            r.spilled.readInto(payload)
          } else region = r.spilled.toFileRegion
        } catch {
          case NonFatal(e) => throw new UnreadablePayloadException(r.receiverId, e, r.payloadSize.toLong)
        }
      }
      header = ctx.alloc().directBuffer(NettyMessage.FrameHeaderLength + r.encodedLength)
      NettyMessage.writeFrameHeader(header, r.frameLength, r.id)
      r.encode(header)
      if (payload != null) {
        val frame = ctx.alloc().compositeDirectBuffer(2)
        frame.addComponents(true, header, payload)
        header = null; payload = null
        ctx.write(frame, promise)
      } else {
        ctx.write(header)
        header = null
        val sending = region
        region = null
        ctx.write(sending, promise)
      }
    } catch {
      case e: Throwable =>
        if (header != null) header.release()
        if (payload != null) payload.release()
        if (region != null) region.release()
        promise.tryFailure(e)
    }
  }

  private def writePackedBufferResponse(ctx: ChannelHandlerContext, r: PackedBufferResponse, promise: ChannelPromise): Unit = {
    if (r.spilled.size > 1 || (r.spilled.nonEmpty && ctx.pipeline().get(classOf[SslHandler]) != null)) {
      writePackedCopy(ctx, r, promise)
    } else {
      var header: ByteBuf = null
      var region: FileRegion = null
      try {
        if (r.spilled.nonEmpty) {
          try region = r.spilled.head.toFileRegion
          catch { case NonFatal(e) => throw new UnreadablePayloadException(r.receiverId, e, r.payloadSize.toLong) }
        }
        header = ctx.alloc().directBuffer(NettyMessage.FrameHeaderLength + r.encodedLength)
        NettyMessage.writeFrameHeader(header, r.frameLength, r.id)
        r.encode(header)
        val h = header
        header = null
        if (region == null) ctx.write(h, promise)
        else {
          ctx.write(h)
          val sending = region
          region = null
          ctx.write(sending, promise)
        }
      } catch {
        case e: Throwable =>
          if (header != null) header.release()
          if (region != null) region.release()
          promise.tryFailure(e)
      }
    }
  }

  /**
   * A frame packing several stored buffers (or behind TLS, any): header and payload in one buffer,
   * each stored buffer read into it with one positional read, then one write. Hundred-byte map
   * outputs would otherwise cost a sendfile(2) and a TCP segment each; the frame is at most one
   * receiver buffer long, so the copy is small. Nothing is sent unless every stored buffer was read.
   */
  private def writePackedCopy(ctx: ChannelHandlerContext, r: PackedBufferResponse, promise: ChannelPromise): Unit = {
    var frame: ByteBuf = null
    try {
      frame = ctx.alloc().directBuffer(NettyMessage.FrameHeaderLength + r.encodedLength + r.payloadSize)
      NettyMessage.writeFrameHeader(frame, r.frameLength, r.id)
      r.encode(frame)
      try r.spilled.foreach(_.readInto(frame))
      catch { case NonFatal(e) => throw new UnreadablePayloadException(r.receiverId, e, r.payloadSize.toLong) }
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
