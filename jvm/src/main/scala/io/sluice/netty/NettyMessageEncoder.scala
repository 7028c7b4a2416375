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
 * Spark recomputes. A PackedBufferResponse goes out the same way: its header, then one FileRegion
 * per stored buffer it packs (behind TLS, one buffer they are all read into), every file opened
 * before the header is written. Stateless and shared by every connection.
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
    var header: ByteBuf = null
    var payload: ByteBuf = null
    val regions = new java.util.ArrayList[FileRegion](r.spilled.size)
    try {
      try {
        if (r.spilled.nonEmpty && ctx.pipeline().get(classOf[SslHandler]) != null) {
          payload = ctx.alloc().directBuffer(r.payloadSize)
          r.spilled.foreach(_.readInto(payload))
        } else r.spilled.foreach(b => regions.add(b.toFileRegion))
      } catch {
        case NonFatal(e) => throw new UnreadablePayloadException(r.receiverId, e, r.payloadSize.toLong)
      }
      header = ctx.alloc().directBuffer(NettyMessage.FrameHeaderLength + r.encodedLength)
      NettyMessage.writeFrameHeader(header, r.frameLength, r.id)
      r.encode(header)
      val h = header
      header = null
      if (payload != null) {
        val frame = ctx.alloc().compositeDirectBuffer(2)
        frame.addComponents(true, h, payload)
        payload = null
        ctx.write(frame, promise)
      } else if (regions.isEmpty) ctx.write(h, promise)
      else {
        ctx.write(h)
        val last = regions.size - 1
        var i = 0
        while (i < last) { ctx.write(regions.get(i)); regions.set(i, null); i += 1 }
        val sending = regions.get(last)
        regions.clear()
        ctx.write(sending, promise)
      }
    } catch {
      case e: Throwable =>
        if (header != null) header.release()
        if (payload != null) payload.release()
        regions.forEach(region => if (region != null) region.release())
        promise.tryFailure(e)
    }
  }
}
