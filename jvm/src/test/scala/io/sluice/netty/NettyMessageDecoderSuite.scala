package io.sluice.netty

import io.netty.buffer.{ByteBuf, Unpooled, UnpooledByteBufAllocator, UnpooledHeapByteBuf}
import io.netty.channel.embedded.EmbeddedChannel
import io.sluice.NettyLeakDetection
import io.sluice.partition.{BufferIv, ResultPartitionID}
import io.sluice.partition.consumer.RemoteInputChannel
import io.sluice.netty.TestingReceivers.{bytes, encode}
import org.scalatest.funsuite.AnyFunSuite

/** The decoder rejects every malformed frame by name, never leaks a buffer, and stalls credit-less connections. */
class NettyMessageDecoderSuite extends AnyFunSuite with NettyLeakDetection {

  private val someId = InputChannelID(1, 2)

  private def frame(length: Int, magic: Int, id: Int, body: Array[Byte]): Array[Byte] = {
    val b = Unpooled.buffer()
    b.writeInt(length).writeInt(magic).writeByte(id).writeBytes(body)
    val a = new Array[Byte](b.readableBytes()); b.readBytes(a); a
  }

  /** Feeds `data` and returns the protocol error the decoder raised. */
  private def rejected(ch: EmbeddedChannel, data: Array[Byte]): TransportProtocolException = {
    val input = bytes(data)
    val e = intercept[TransportProtocolException](ch.writeInbound(input))
    assert(input.refCnt() == 0, "the rejected input was released")
    assert(decoderOf(ch).holdsNothing, "the decoder gave back its own buffers")
    assert(e.getMessage.contains("embedded"), s"names the remote address: ${e.getMessage}")
    // Everything after a failure is dropped (and released).
    val more = bytes(encode(CloseRequest))
    ch.writeInbound(more)
    assert(more.refCnt() == 0)
    assert(ch.readInbound[AnyRef]() == null)
    e
  }

  private def decoderOf(ch: EmbeddedChannel): NettyMessageDecoder = ch.pipeline().get(classOf[NettyMessageDecoder])

  /** Input whose bytes from `poisonAt` on cannot be read, as a buffer freed under its reader. */
  private final class PoisonedInput(data: Array[Byte], poisonAt: Int)
    extends UnpooledHeapByteBuf(UnpooledByteBufAllocator.DEFAULT, data, data.length) {
    override def hasArray: Boolean = false // copies go through getBytes
    override def getBytes(index: Int, dst: ByteBuf, dstIndex: Int, length: Int): ByteBuf =
      if (index + length > poisonAt) throw new IllegalStateException(s"input unreadable from byte $poisonAt")
      else super.getBytes(index, dst, dstIndex, length)
  }

  test("bad magic, unknown ids, wrong direction and impossible lengths close the connection with a named error") {
    val ok = encode(AddCredit(someId, 3))
    val cases: Seq[(Array[Byte], String)] = Seq(
      frame(9, 0x12345678, 4, Array.empty) -> "bad magic 0x12345678",
      frame(9, NettyMessage.Magic, 99, Array.empty) -> "unknown message id 99",
      frame(9 + 24, NettyMessage.Magic, EndOfPartition.Id, new Array[Byte](24)) -> "EndOfPartition sent in the wrong direction",
      frame(-5, NettyMessage.Magic, 4, Array.empty) -> "frame length -5",
      frame(3, NettyMessage.Magic, 4, Array.empty) -> "frame length 3",
      frame(Int.MaxValue, NettyMessage.Magic, 0, Array.empty) -> s"frame length ${Int.MaxValue}",
      frame(9 + 5, NettyMessage.Magic, AddCredit.Id, new Array[Byte](5)) -> "AddCredit with a 5-byte body (expected 20)",
      frame(9 + 1, NettyMessage.Magic, CloseRequest.Id, new Array[Byte](1)) -> "CloseRequest with a 1-byte body",
      frame(9 + 4, NettyMessage.Magic, Ping.Id, new Array[Byte](4)) -> "Ping with a 4-byte body (expected 8)",
      frame(9 + 12, NettyMessage.Magic, Ping.Id, new Array[Byte](12)) -> "Ping with a 12-byte body (expected 8)",
      frame(9 + 8, NettyMessage.Magic, Pong.Id, new Array[Byte](8)) -> "Pong sent in the wrong direction",
      (ok.take(9) ++ Array.fill[Byte](16)(0) ++ Array[Byte](0, 0, 0, 0)) -> "AddCredit of 0",
      encode(PartitionRequest(ResultPartitionID(1, 1), 3, 3, someId, 1, true, false)) -> "subpartitions [3, 3)")
    cases.foreach { case (data, expected) =>
      val e = rejected(TestingReceivers.serverChannel(), data)
      assert(e.getMessage.contains(expected), s"expected '$expected' in: ${e.getMessage}")
    }
  }

  test("frames of the client direction with inconsistent fields are rejected") {
    val r = new TestingReceivers()
    val id = r.channels.head.id
    val good = encode(BufferResponse(id, 0, 0, 0, bytes(new Array[Byte](100))))
    // Announce 50 payload bytes in a frame carrying 100.
    val lying = good.clone(); java.nio.ByteBuffer.wrap(lying).putInt(9 + BufferResponse.HeaderLength - 4, 50)
    assert(rejected(r.clientChannel(), lying).getMessage.contains("announcing a 50-byte payload"))
    val unknown = encode(BufferResponse(InputChannelID(9, 9), 0, 0, 0, bytes(new Array[Byte](10))))
    assert(rejected(r.clientChannel(), unknown).getMessage.contains("unknown receiver"))
    val tooBig = encode(BufferResponse(id, 0, 0, 0, bytes(new Array[Byte](5000))))
    assert(rejected(r.clientChannel(), tooBig).getMessage.contains("5000-byte payload for a 4096-byte buffer"))
    val err = encode(ErrorResponse(Some(id), ErrorKind.Other, "c", "m"))
    java.nio.ByteBuffer.wrap(err).putShort(9 + 1 + 16 + 1 + 4, 900.toShort) // class-name length beyond the body
    assert(rejected(r.clientChannel(), err).getMessage.contains("900-byte class name"))
    val shortPong = frame(9 + 7, NettyMessage.Magic, Pong.Id, new Array[Byte](7))
    assert(rejected(r.clientChannel(), shortPong).getMessage.contains("Pong with a 7-byte body (expected 8)"))
    val ping = frame(9 + 8, NettyMessage.Magic, Ping.Id, new Array[Byte](8))
    assert(rejected(r.clientChannel(), ping).getMessage.contains("Ping sent in the wrong direction"))
    val big = frame(9 + ErrorResponse.FixedLength + 70000, NettyMessage.Magic, ErrorResponse.Id, Array.empty)
    assert(rejected(r.clientChannel(), big).getMessage.contains("maxFrameLength"))
    val negativeInput = encode(ErrorResponse(Some(id), ErrorKind.Other, "c", "m"))
    java.nio.ByteBuffer.wrap(negativeInput).putInt(9 + 1 + 16 + 1, -2)
    assert(rejected(r.clientChannel(), negativeInput).getMessage.contains("ErrorResponse for input -2"))
    def encrypted(checksum: Boolean) = encode(BufferResponse(id, 0, 0, 0, bytes(new Array[Byte](100)))
        .copy(hasChecksum = checksum, iv = BufferIv(1, 2))(bytes(new Array[Byte](100))))
    val flagsAt = 9 + 16 + 12
    val unknownFlag = encrypted(true); unknownFlag(flagsAt) = (unknownFlag(flagsAt) | 8).toByte
    assert(rejected(r.clientChannel(), unknownFlag).getMessage.contains("unknown flags 0xe"))
    assert(rejected(r.clientChannel(), encrypted(false)).getMessage.contains("encrypted payload but no checksum"))
    // A frame that ends with the IV: nothing left for the payload (the decoder must not read into the next frame).
    val noPayload = encrypted(true).take(9 + BufferResponse.HeaderLength + BufferIv.Length)
    java.nio.ByteBuffer.wrap(noPayload).putInt(0, noPayload.length)
    assert(rejected(r.clientChannel(), noPayload ++ encode(EndOfPartition(id, 1, 0))).getMessage
        .contains("no payload after an encrypted buffer's header"))
    r.close()
    assert(r.networkBufferPool.numberOfAvailableSegments == 64, "no buffer leaked")
  }

  test("a request or data frame beyond the frame limit is skipped, passed on for its receiver alone; the next frame decodes") {
    val limit = 16 << 10
    // Server side: a request for 2000 inputs (40 KB) against a 16 KiB limit, then an AddCredit, in small pieces.
    val request = MultiPartitionRequest(someId, 2, creditBased = true,
      (0 until 2000).map(i => RequestedSubpartitions(ResultPartitionID(1, i), 0, 1)))
    val server = TestingReceivers.serverChannel(maxFrameLength = limit)
    val data = encode(request, AddCredit(InputChannelID(5, 6), 3))
    data.grouped(1000).foreach(piece => server.writeInbound(bytes(piece)))
    val o = server.readInbound[OversizedFrame]()
    assert(o.receiverId == someId && o.messageName == "MultiPartitionRequest" && o.frameLength == data.length - (9 + 20))
    assert(o.describe.contains("spark.sluice.network.maxFrameLength") && o.describe.contains(s"$limit bytes"), o.describe)
    assert(server.readInbound[AnyRef]() == AddCredit(InputChannelID(5, 6), 3))
    assert(!server.finish())
    // Client side: a packed frame beyond the limit takes no buffer; the frame after it still reaches its channel.
    val r = new TestingReceivers()
    val id = r.channels.head.id
    val client = r.clientChannel(maxFrameLength = limit)
    val huge = encode(BufferResponse(id, 0, 0, 0, bytes(new Array[Byte](limit))))
    client.writeInbound(bytes(huge ++ encode(EndOfPartition(id, 1, 0))))
    val skipped = client.readInbound[OversizedFrame]()
    assert(skipped.receiverId == id && skipped.messageName == "BufferResponse" && skipped.frameLength == huge.length)
    assert(r.gate.floatingBuffers.numUsedBuffers == 0, "no buffer taken for the skipped payload")
    assert(client.readInbound[AnyRef]() == EndOfPartition(id, 1, 0))
    // A fixed-length message beyond the limit still fails the connection: it has no receiver to tell.
    val bad = frame(limit + 100, NettyMessage.Magic, AddCredit.Id, new Array[Byte](20))
    assert(rejected(TestingReceivers.serverChannel(maxFrameLength = limit), bad).getMessage.contains("maxFrameLength"))
    client.finishAndReleaseAll()
    r.close()
  }

  test("a truncated frame followed by the connection closing leaks nothing") {
    val r = new TestingReceivers()
    val data = encode(BufferResponse(r.channels.head.id, 0, 0, 0, bytes(new Array[Byte](3000))))
    val ch = r.clientChannel()
    val decoder = decoderOf(ch)
    val input = bytes(data.take(2000))
    ch.writeInbound(input)
    assert(ch.readInbound[AnyRef]() == null)
    assert(input.refCnt() == 0 && r.gate.floatingBuffers.numUsedBuffers == 1, "the payload is half-way in a buffer")
    ch.close()
    assert(decoder.holdsNothing)
    assert(r.gate.floatingBuffers.numUsedBuffers == 0, "the half-filled buffer went back")
    r.close()
    assert(r.networkBufferPool.numberOfAvailableSegments == 64)
  }

  test("any exception while a payload is copied fails the connection naming the frame and the peer; nothing leaks") {
    val r = new TestingReceivers()
    val data = encode(BufferResponse(r.channels.head.id, 0, 0, 0, bytes(new Array[Byte](3000))))
    val ch = r.clientChannel()
    val input = new PoisonedInput(data, poisonAt = 1000) // the frame header is readable, the payload not all
    val e = intercept[TransportProtocolException](ch.writeInbound(input))
    assert(e.getMessage.contains(s"Could not decode a ${data.length}-byte BufferResponse frame from embedded"), e.getMessage)
    assert(e.getMessage.contains("input unreadable from byte 1000"), e.getMessage)
    assert(e.getCause.isInstanceOf[IllegalStateException])
    assert(input.refCnt() == 0, "the input was released")
    assert(decoderOf(ch).holdsNothing)
    assert(r.gate.floatingBuffers.numUsedBuffers == 0, "the buffer taken for the payload went back")
    val more = bytes(encode(EndOfPartition(r.channels.head.id, 0, 0)))
    ch.writeInbound(more)
    assert(more.refCnt() == 0 && ch.readInbound[AnyRef]() == null, "nothing is decoded after the failure")
    r.close()
    assert(r.networkBufferPool.numberOfAvailableSegments == 64)
  }

  test("an exception from the receiver lookup fails the connection, naming the frame; nothing leaks") {
    val r = new TestingReceivers()
    val broken = new ReceiverLookup {
      override def channelFor(id: InputChannelID): RemoteInputChannel = throw new IllegalStateException("lookup broke")
      override def wasReleased(id: InputChannelID): Boolean = false
    }
    val ch = new EmbeddedChannel(new NettyMessageDecoder(NettyMessage.ServerToClient, 64 << 10, broken, r.counters))
    val data = encode(BufferResponse(r.channels.head.id, 0, 0, 0, bytes(new Array[Byte](100))))
    val input = bytes(data)
    val e = intercept[TransportProtocolException](ch.writeInbound(input))
    assert(e.getMessage.contains(s"a ${data.length}-byte BufferResponse frame from embedded") &&
        e.getMessage.contains("lookup broke"), e.getMessage)
    assert(input.refCnt() == 0 && decoderOf(ch).holdsNothing)
    assert(r.counters.protocolErrors.sum == 0, "not counted as the peer's protocol error")
    r.close()
    assert(r.networkBufferPool.numberOfAvailableSegments == 64)
  }

  test("data for a released channel is dropped and its buffer is not leaked") {
    val r = new TestingReceivers(numChannels = 2)
    val ch = r.clientChannel()
    val (gone, live) = (r.channels(0), r.channels(1))
    r.release(gone)
    ch.writeInbound(bytes(encode(BufferResponse(gone.id, 0, 0, 0, bytes(new Array[Byte](1000))),
          BufferResponse(live.id, 0, 0, 0, bytes(Array.fill[Byte](10)(5))))))
    val first = ch.readInbound[BufferResponse]()
    assert(first.receiverId == gone.id && first.data == null, "the released channel's payload was skipped")
    val second = ch.readInbound[BufferResponse]()
    assert(second.receiverId == live.id && second.data.readableBytes() == 10)
    second.data.release()
    r.close()
    assert(r.networkBufferPool.numberOfAvailableSegments == 64)
  }

  test("credit-based: a buffer beyond the channel's credit is a protocol error") {
    val r = new TestingReceivers(creditBased = true, exclusive = 2)
    val id = r.channels.head.id
    val ch = r.clientChannel()
    ch.writeInbound(bytes(encode((0 until 2).map(i => BufferResponse(id, i, 0, 0, bytes(new Array[Byte](10)))): _*)))
    val got = Seq(ch.readInbound[BufferResponse](), ch.readInbound[BufferResponse]())
    val e = rejected(ch, encode(BufferResponse(id, 2, 0, 0, bytes(new Array[Byte](10)))))
    assert(e.getMessage.contains("beyond its credit"), e.getMessage)
    assert(r.counters.creditOverruns.sum == 1)
    got.foreach(_.data.release())
    r.close()
    assert(r.networkBufferPool.numberOfAvailableSegments == 64)
  }

  test("credit-less: no free buffer turns auto-read off and waits; a recycled buffer resumes decoding") {
    val r = new TestingReceivers(gateBuffers = 1)
    val id = r.channels.head.id
    val ch = r.clientChannel()
    val decoder = ch.pipeline().get(classOf[NettyMessageDecoder])
    val data = encode((0 until 3).map(i => BufferResponse(id, i, 0, 0, bytes(Array.fill[Byte](1000)(i.toByte)))): _*)
    ch.writeInbound(bytes(data))
    val first = ch.readInbound[BufferResponse]()
    assert(first.data.getByte(0) == 0)
    assert(ch.readInbound[AnyRef]() == null)
    assert(decoder.isStalled && !ch.config().isAutoRead, "the whole connection stops reading")
    assert(r.counters.readStalls.sum == 1)
    // Input that was already read when auto-read went off is kept, in order.
    ch.writeInbound(bytes(encode(EndOfPartition(id, 3, 0))))
    first.data.release() // the task recycles the buffer: the decoder takes it and goes on
    ch.runPendingTasks()
    val second = ch.readInbound[BufferResponse]()
    assert(second.sequenceNumber == 1 && second.data.getByte(999) == 1)
    assert(decoder.isStalled, "stalls again for the third buffer")
    second.data.release(); ch.runPendingTasks()
    val third = ch.readInbound[BufferResponse]()
    assert(third.sequenceNumber == 2)
    assert(ch.readInbound[EndOfPartition]() == EndOfPartition(id, 3, 0))
    assert(!decoder.isStalled && ch.config().isAutoRead)
    third.data.release()
    r.close()
    assert(r.networkBufferPool.numberOfAvailableSegments == 64)
  }

  test("credit-less: a bad frame in input held during a stall is rejected when decoding resumes; nothing leaks") {
    val r = new TestingReceivers(gateBuffers = 1)
    val id = r.channels.head.id
    val ch = r.clientChannel()
    val decoder = decoderOf(ch)
    ch.writeInbound(bytes(encode((0 until 2).map(i => BufferResponse(id, i, 0, 0, bytes(new Array[Byte](100)))): _*)))
    val first = ch.readInbound[BufferResponse]()
    assert(decoder.isStalled)
    val bad = bytes(frame(9, 0x12345678, 4, Array.empty))
    ch.writeInbound(bad)
    first.data.release()
    ch.runPendingTasks()
    val e = intercept[TransportProtocolException](ch.checkException())
    assert(e.getMessage.contains("bad magic 0x12345678") && e.getMessage.contains("embedded"), e.getMessage)
    val second = ch.readInbound[BufferResponse]()
    assert(second.sequenceNumber == 1, "the frame before the bad one was delivered")
    second.data.release()
    assert(bad.refCnt() == 0 && decoder.holdsNothing)
    r.close()
    assert(r.networkBufferPool.numberOfAvailableSegments == 64)
  }

  Seq("the connection closes", "the decoder is removed").foreach { how =>
    test(s"credit-less: when $how during a stall, held input and the wait on the pool are given up") {
      val r = new TestingReceivers(gateBuffers = 1)
      val id = r.channels.head.id
      val ch = r.clientChannel()
      val decoder = decoderOf(ch)
      val input = bytes(encode((0 until 3).map(i => BufferResponse(id, i, 0, 0, bytes(new Array[Byte](100)))): _*))
      val late = bytes(encode(EndOfPartition(id, 3, 0)))
      ch.writeInbound(input)
      ch.writeInbound(late)
      val first = ch.readInbound[BufferResponse]()
      assert(decoder.isStalled && input.refCnt() == 1 && late.refCnt() == 1, "input is held while stalled")
      if (how == "the connection closes") ch.close() else ch.pipeline().remove(decoder)
      assert(input.refCnt() == 0 && late.refCnt() == 0 && decoder.holdsNothing)
      first.data.release() // the pool no longer hands its buffer to the decoder
      ch.runPendingTasks()
      assert(ch.readInbound[AnyRef]() == null)
      assert(r.gate.floatingBuffers.numUsedBuffers == 0, "the recycled buffer stayed in the gate's pool")
      r.close()
      assert(r.networkBufferPool.numberOfAvailableSegments == 64)
    }
  }

  test("credit-less: a stalled connection skips the payload when the gate closes instead of waiting forever") {
    val r = new TestingReceivers(gateBuffers = 1)
    val id = r.channels.head.id
    val ch = r.clientChannel()
    ch.writeInbound(bytes(encode((0 until 2).map(i => BufferResponse(id, i, 0, 0, bytes(new Array[Byte](100)))): _*)))
    val first = ch.readInbound[BufferResponse]()
    r.close() // the gate goes: its pool is destroyed
    ch.runPendingTasks()
    val second = ch.readInbound[BufferResponse]()
    assert(second.data == null && ch.config().isAutoRead)
    first.data.release()
    assert(r.networkBufferPool.numberOfAvailableSegments == 64)
  }

}
