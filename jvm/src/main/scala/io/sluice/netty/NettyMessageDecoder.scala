package io.sluice.netty

import java.util.concurrent.RejectedExecutionException

import io.netty.buffer.{ByteBuf, Unpooled}
import io.netty.channel.{ChannelHandlerContext, ChannelInboundHandlerAdapter}
import io.sluice.memory.{BufferListener, NetworkBuffer}
import io.sluice.partition.consumer.RemoteInputChannel

/**
 * Reads frames off one connection with a state machine (Flink's NettyMessageClientDecoderDelegate
 * and its BufferResponseDecoder), never gathering a payload: headers and fields are collected in a
 * small reused array ([[NettyMessageDecoder.MaxBodyLength]]), a payload is copied straight into a
 * buffer of the receiving [[RemoteInputChannel]], or skipped when that channel was released.
 *
 * A request or data frame longer than `maxFrameLength` ([[NettyMessage.Type.receiverIdFirst]]) is
 * skipped after its receiver id and passed on as an [[OversizedFrame]]: it fails that receiver only.
 * Anything else malformed (bad magic or id, lengths out of range or contradicting the fields, data
 * for an unknown receiver or beyond its credit), and any other exception while decoding, fails the
 * connection with an error naming the problem, the frame and the peer. However the decoder is left,
 * it releases everything it holds. Credit-less mode: when the receiving gate has no buffer free,
 * auto-read goes off for the whole connection until one comes back ("How Flink passes data
 * internally"), which is what credit-based flow control removes.
 *
 * Confined to the connection's event loop, except the pool's listener, which only hands over.
 *
 * @param acceptedIds the message ids this side may receive
 * @param receivers   the client's channels (null on the server, which receives no payloads)
 */
private[netty] final class NettyMessageDecoder(
    acceptedIds: Set[Byte],
    maxFrameLength: Int,
    receivers: ReceiverLookup,
    counters: TransportCounters) extends ChannelInboundHandlerAdapter {

  import NettyMessageDecoder._

  private val header = Unpooled.buffer(MaxBodyLength, MaxBodyLength)

  /** Where the fields go: `header`, or a buffer of its own for a MultiPartitionRequest larger than it. */
  private var fields = header
  private var state = ReadingFrameHeader
  private var ctx: ChannelHandlerContext = _
  private var frameLength = 0
  private var messageId: Byte = 0
  private var messageType: NettyMessage.Type = _
  private var bodyLength = 0

  /** Bytes of the body gathered in `header`: the message's fields (a BufferResponse's header, not its payload). */
  private var fieldsLength = 0

  // The BufferResponse or PackedBufferResponse whose payload is being read, where the payload goes (null: skipped) and
  // how much of it is still to come.
  private var response: PayloadResponse = _
  private var target: NetworkBuffer = _
  private var discarding = false
  private var payloadLeft = 0

  // A frame beyond maxFrameLength whose receiver id comes first: skipped, then passed on as `skipped`.
  private var oversized = false
  private var skipped: OversizedFrame = _

  // Credit-less stall: the channel whose pool is awaited, and input that arrived meanwhile.
  private var stalledOn: RemoteInputChannel = _
  private val stalledInput = new java.util.ArrayDeque[ByteBuf]()

  override def handlerAdded(ctx: ChannelHandlerContext): Unit = this.ctx = ctx

  override def channelRead(ctx: ChannelHandlerContext, msg: AnyRef): Unit = msg match {
    case in: ByteBuf =>
      if (state == Failed) in.release()
      else if (state == AwaitingBuffer || !stalledInput.isEmpty) stalledInput.add(in)
      else {
        var kept = false
        try {
          decode(in)
          if (state == AwaitingBuffer && in.isReadable) { stalledInput.add(in); kept = true }
        } finally if (!kept) in.release()
      }
    case other => ctx.fireChannelRead(other)
  }

  /** Decodes `in` until it is exhausted, the connection stalls or fails. */
  private def decode(in: ByteBuf): Unit = {
    try {
      while (in.isReadable && state != AwaitingBuffer && state != Failed) {
        state match {
          case ReadingFrameHeader =>
            copyToHeader(in, NettyMessage.FrameHeaderLength)
            if (header.readableBytes() == NettyMessage.FrameHeaderLength) startFrame()
          case ReadingBody =>
            copyToHeader(in, fieldsLength)
            if (fields.readableBytes() == fieldsLength) fieldsRead()
          case ReadingPayload =>
            val n = math.min(payloadLeft, in.readableBytes())
            if (target != null) target.writeBytes(in, n) else in.skipBytes(n)
            payloadLeft -= n
            if (payloadLeft == 0) finishPayload()
        }
      }
    } catch {
      case e: Throwable => failOn(e)
    }
  }

  private def copyToHeader(in: ByteBuf, upTo: Int): Unit =
    in.readBytes(fields, math.min(upTo - fields.readableBytes(), in.readableBytes()))

  private def startFrame(): Unit = {
    fields = header
    frameLength = header.readInt()
    val magic = header.readInt()
    messageId = header.readByte()
    header.clear()
    check(magic == NettyMessage.Magic, s"bad magic 0x${Integer.toHexString(magic)} (not a Sluice peer?)")
    messageType = NettyMessage.typeOf(messageId)
    oversized = frameLength > maxFrameLength && acceptedIds.contains(messageId) && messageType.receiverIdFirst
    if (oversized) { // too long, but its receiver can be told: read the id, skip the rest
      bodyLength = frameLength - NettyMessage.FrameHeaderLength
      fieldsLength = InputChannelID.Length
      state = ReadingBody
      return
    }
    check(frameLength >= NettyMessage.FrameHeaderLength && frameLength <= maxFrameLength,
      s"frame length $frameLength outside [${NettyMessage.FrameHeaderLength}, $maxFrameLength] " +
        "(spark.sluice.network.maxFrameLength)")
    check(acceptedIds.contains(messageId),
      if (messageType == null) NettyMessage.nameOf(messageId) else s"${messageType.name} sent in the wrong direction")
    bodyLength = frameLength - NettyMessage.FrameHeaderLength
    val (min, max) = (messageType.minBodyLength, messageType.maxBodyLength)
    check(bodyLength >= min && bodyLength <= max,
      s"${messageType.name} with a $bodyLength-byte body (expected ${if (min == max) s"$min" else s"$min to $max"})")
    fieldsLength = messageType.prefixLength(bodyLength)
    // A request for many inputs may exceed the fixed header buffer; it is bounded by the frame length.
    if (fieldsLength > header.capacity()) fields = Unpooled.buffer(fieldsLength, fieldsLength)
    if (fieldsLength == 0) finishBody() else state = ReadingBody
  }

  /** The fields gathered so far are all there is, or (an encrypted BufferResponse) its IV is still to come. */
  private def fieldsRead(): Unit = if (oversized) skipOversized()
  else {
    val full = messageType.fieldsLength(fields, bodyLength)
    if (full == fieldsLength) finishBody()
    else {
      check(bodyLength >= full, s"${messageType.name} with a $bodyLength-byte body, shorter than its $full-byte header")
      fieldsLength = full
    }
  }

  /** The receiver id of an oversized frame was read: the rest is skipped, then [[OversizedFrame]] goes on. */
  private def skipOversized(): Unit = {
    val receiver = InputChannelID.readFrom(fields)
    releaseFields()
    skipped = OversizedFrame(receiver, messageType.name, frameLength, maxFrameLength,
      String.valueOf(ctx.channel().remoteAddress()))
    payloadLeft = bodyLength - InputChannelID.Length
    state = ReadingPayload
    discard()
  }

  private def finishBody(): Unit = {
    val msg = messageType.decode(fields, bodyLength)
    releaseFields()
    msg match {
      case r: PayloadResponse => startPayload(r)
      case m => emit(m)
    }
  }

  /** Clears the header buffer, and drops a request's own fields buffer. */
  private def releaseFields(): Unit = {
    if (!(fields eq header) && fields.refCnt() > 0) fields.release()
    fields = header
    header.clear()
  }

  /**
   * Finds where the payload of `r` (a BufferResponse or a PackedBufferResponse) goes: a buffer of
   * its channel, nowhere, or (credit-less) later. A packed frame takes a buffer even when it carries
   * only ends (no payload): every frame is one credit.
   */
  private def startPayload(r: PayloadResponse): Unit = {
    response = r
    payloadLeft = r.payloadSize
    state = ReadingPayload
    val channel = receivers.channelFor(r.receiverId)
    if (channel == null) {
      check(receivers.wasReleased(r.receiverId), s"${messageType.name} for unknown receiver ${r.receiverId}")
      discard()
    } else {
      val buffer =
        try channel.requestBufferForData(stallListener)
        catch {
          case e: TransportProtocolException => counters.creditOverruns.increment(); throw e
        }
      if (buffer != null) useTarget(buffer)
      else if (channel.isReleased) discard()
      else {
        state = AwaitingBuffer
        stalledOn = channel
        ctx.channel().config().setAutoRead(false)
        counters.readStalls.increment()
      }
    }
  }

  private def useTarget(buffer: NetworkBuffer): Unit = {
    if (buffer.writableBytes() < payloadLeft) {
      buffer.release()
      throw new TransportProtocolException(s"BufferResponse with a $payloadLeft-byte payload for a " +
        s"${buffer.capacity()}-byte buffer (different spark.sluice.memory.segmentSize?)")
    }
    target = buffer
    discarding = false
    if (payloadLeft == 0) finishPayload()
  }

  private def discard(): Unit = {
    target = null
    discarding = true
    if (payloadLeft == 0) finishPayload()
  }

  private def finishPayload(): Unit = if (oversized) { oversized = false; emit(skipped) }
  else {
    val data = target
    target = null
    val r = response
    response = null
    counters.buffersReceived.increment()
    counters.bytesReceived.add(r.payloadSize.toLong)
    emit(r.withData(if (discarding) null else data))
  }

  private def emit(m: AnyRef): Unit = {
    state = ReadingFrameHeader
    ctx.fireChannelRead(m)
  }

  // ---- credit-less stall ----------------------------------------------------------------------

  /** Receives the buffer the stalled connection waits for, on any thread; decoding goes on in the loop. */
  private object stallListener extends BufferListener {
    override def notifyBufferAvailable(buffer: NetworkBuffer): Boolean = handOver(buffer)
    override def notifyBufferDestroyed(): Unit = handOver(null)

    private def handOver(buffer: NetworkBuffer): Boolean = {
      val loop = ctx.executor()
      if (loop.isShuttingDown) false
      else
        try { loop.execute(() => resume(buffer)); true }
        catch { case _: RejectedExecutionException => false }
    }
  }

  /** Continues after a stall with `buffer` (null: the gate went away, skip the payload). */
  private def resume(buffer: NetworkBuffer): Unit = {
    if (state != AwaitingBuffer) { if (buffer != null) buffer.release(); return }
    val channel = stalledOn
    stalledOn = null
    state = ReadingPayload
    try {
      if (buffer == null || channel.isReleased) { if (buffer != null) buffer.release(); discard() }
      else useTarget(buffer)
      while (!stalledInput.isEmpty && state != AwaitingBuffer && state != Failed) {
        val in = stalledInput.peek()
        decode(in)
        // A failure released the held input already.
        if (state != Failed && !in.isReadable) stalledInput.poll().release()
      }
      if (state != AwaitingBuffer && state != Failed) ctx.channel().config().setAutoRead(true)
    } catch {
      case e: Throwable => if (state != Failed) failOn(e)
    }
  }

  /** Bytes held while stalled: at most what Netty read before auto-read went off. */
  def numStalledBytes: Int = { var n = 0; stalledInput.forEach(b => n += b.readableBytes()); n }

  def isStalled: Boolean = state == AwaitingBuffer

  // ---- failure and clean-up -------------------------------------------------------------------

  private def check(condition: Boolean, what: => String): Unit = if (!condition) throw new TransportProtocolException(what)

  /** Fails the connection for `e`, thrown while decoding: bad bytes, or anything else. */
  private def failOn(e: Throwable): Unit = {
    val peer = ctx.channel().remoteAddress()
    e match {
      case p: TransportProtocolException =>
        counters.protocolErrors.increment()
        fail(s"Bad data from $peer: ${p.getMessage}", null)
      case i: IndexOutOfBoundsException =>
        counters.protocolErrors.increment()
        fail(s"Bad data from $peer: truncated ${NettyMessage.nameOf(messageId)}: ${i.getMessage}", i)
      case other =>
        fail(s"Could not decode $frameName from $peer (${other.getClass.getName}: ${other.getMessage})", other)
    }
  }

  /** The frame being read, for errors. */
  private def frameName: String =
    if (state == ReadingFrameHeader) "a frame header"
    else s"a $frameLength-byte ${NettyMessage.nameOf(messageId)} frame"

  private def fail(what: String, cause: Throwable): Unit =
    try releaseAll()
    finally ctx.fireExceptionCaught(new TransportProtocolException(s"$what; closing the connection", cause))

  /** Gives back everything held; the decoder reads nothing more. Idempotent. */
  private def releaseAll(): Unit = {
    state = Failed
    val t = target
    val s = stalledOn
    target = null
    response = null
    stalledOn = null
    try {
      if (t != null) t.release()
      if (s != null) s.removeBufferListener(stallListener)
    } finally {
      while (!stalledInput.isEmpty) stalledInput.poll().release()
      if (!(fields eq header) && fields.refCnt() > 0) fields.release()
      if (header.refCnt() > 0) header.release()
    }
  }

  /** Whether the decoder holds no buffer (tests). */
  private[netty] def holdsNothing: Boolean = target == null && stalledInput.isEmpty && header.refCnt() == 0

  override def channelInactive(ctx: ChannelHandlerContext): Unit = {
    releaseAll()
    ctx.fireChannelInactive()
  }

  override def handlerRemoved(ctx: ChannelHandlerContext): Unit = releaseAll()
}

private[netty] object NettyMessageDecoder {
  private final val ReadingFrameHeader = 0
  private final val ReadingBody = 1
  private final val ReadingPayload = 2
  private final val AwaitingBuffer = 3
  private final val Failed = 4

  /** The largest body of a message without payload (and of a BufferResponse header). */
  val MaxBodyLength: Int = Seq(ErrorResponse.MaxLength, PartitionRequest.Length, PackedBufferResponse.MaxHeaderLength).max
}
