package io.sluice.netty

import java.io.File
import java.nio.file.Files

import scala.util.Random

import io.netty.buffer.{ByteBuf, Unpooled}
import io.netty.channel.embedded.EmbeddedChannel
import io.sluice.NettyLeakDetection
import io.sluice.buffer.BlockCodec
import io.sluice.partition.{BufferIv, PartitionedFile, PartitionedFileCipher, ResultPartitionID, SpilledBuffer}
import io.sluice.netty.TestingReceivers.{bytes, encode}
import org.scalatest.funsuite.AnyFunSuite

/** Every message survives encode then decode unchanged (Spark's ProtocolSuite, Flink's NettyMessageSerializationTest). */
class NettyMessageSuite extends AnyFunSuite with NettyLeakDetection {

  private val id = InputChannelID(0x0123456789abcdefL, -42L)

  private val clientToServer: Seq[NettyMessage] = Seq(
    PartitionRequest(ResultPartitionID(3, 1L << 40), 0, 1, id, 2, creditBased = true, waitForProducer = false),
    PartitionRequest(ResultPartitionID(0, 0), 5, 9, id, 0, creditBased = false, waitForProducer = true),
    PartitionRequest(ResultPartitionID(Int.MaxValue, -1L), 7, 8, id, Int.MaxValue, creditBased = true, waitForProducer = true),
    AddCredit(id, 1),
    AddCredit(id, Int.MaxValue),
    CancelPartitionRequest(id),
    CloseRequest,
    Ping(0L),
    Ping(Long.MaxValue),
    Ping(-1L),
    MultiPartitionRequest(id, 2, creditBased = true, Vector(RequestedSubpartitions(ResultPartitionID(3, 7L), 0, 4))),
    MultiPartitionRequest(id, 0, creditBased = false,
      (0 until 3).map(i => RequestedSubpartitions(ResultPartitionID(1, i), i, i + 1))),
    // To a node shuffle service: the producer executor travels with the inputs.
    MultiPartitionRequest(id, 2, creditBased = true, Vector(RequestedSubpartitions(ResultPartitionID(3, 7L), 0, 4)),
      Some("17")),
    MultiPartitionRequest(id, 1, creditBased = true,
      (0 until 3).map(i => RequestedSubpartitions(ResultPartitionID(1, i), i, i + 1)), Some("executor-\u00e9" * 20)),
    // More inputs than the decoder's fixed header buffer holds: a reducer reading 2000 map outputs of one executor.
    MultiPartitionRequest(id, 2, creditBased = true,
      (0 until 2000).map(i => RequestedSubpartitions(ResultPartitionID(9, i * 3L), 17, 18))))

  private val errors: Seq[ErrorResponse] = ErrorKind.all.flatMap { k =>
    Seq(ErrorResponse(Some(id), k, "java.lang.IllegalStateException", s"boom: ${k.name} \u00e9\u4e2d"),
      ErrorResponse(Some(id), k, "java.io.IOException", "input 1234", input = 1234), ErrorResponse(None, k, "", ""))
  }

  private def decodeAll(ch: EmbeddedChannel, data: Array[Byte], chunked: Boolean): Seq[NettyMessage] = {
    if (!chunked) ch.writeInbound(bytes(data))
    else {
      val r = new Random(7)
      var at = 0
      while (at < data.length) {
        val n = math.min(data.length - at, 1 + r.nextInt(23))
        ch.writeInbound(Unpooled.wrappedBuffer(data, at, n))
        at += n
      }
    }
    Iterator.continually(ch.readInbound[NettyMessage]()).takeWhile(_ != null).toSeq
  }

  for (chunked <- Seq(false, true)) {
    val how = if (chunked) "arriving in small random pieces" else "in one piece"

    test(s"client-to-server messages round-trip, $how") {
      val ch = TestingReceivers.serverChannel()
      assert(decodeAll(ch, encode(clientToServer: _*), chunked) == clientToServer)
      assert(!ch.finish())
    }

    test(s"ErrorResponse, EndOfPartition and Pong round-trip, $how") {
      val r = new TestingReceivers()
      val messages = errors ++ Seq(EndOfPartition(r.channels.head.id, 0, 0), Pong(7L), EndOfPartition(r.channels.head.id, 12, 3),
        Pong(Long.MinValue), Pong(0x0102030405060708L))
      val ch = r.clientChannel()
      assert(decodeAll(ch, encode(messages: _*), chunked) == messages)
      r.close()
    }

    test(s"BufferResponse with an in-memory payload round-trips into the channel's buffer, $how") {
      val r = new TestingReceivers()
      val payloads = Seq.tabulate(5)(i => Array.tabulate[Byte](100 + i * 900)(j => (j * 13 + i).toByte))
      val sent = payloads.zipWithIndex.map { case (p, i) => BufferResponse(r.channels.head.id, i, 4 - i, i % 2, bytes(p)) }
      val encoded = encode(sent: _*)
      assert(encoded.length == sent.map(_.frameLength).sum)
      val got = decodeAll(r.clientChannel(), encoded, chunked).map(_.asInstanceOf[BufferResponse])
      assert(got == sent) // headers
      got.zip(payloads).foreach { case (m, p) =>
        assert(m.data.isInstanceOf[io.sluice.memory.NetworkBuffer], "the payload lands in a buffer of the gate")
        assert(contents(m.data).sameElements(p))
        m.data.release()
      }
      r.close()
      assert(r.networkBufferPool.numberOfAvailableSegments == 64)
    }
  }

  /** A BufferResponse carrying stored buffer `s` as it lies in its file, compressed, checksummed or encrypted. */
  private def storedResponse(id: InputChannelID, seq: Int, backlog: Int, s: SpilledBuffer): BufferResponse = {
    val data = Unpooled.directBuffer(s.storedLength)
    s.readInto(data)
    BufferResponse(id, seq, backlog, 0, s.isCompressed, hasChecksum = true, s.rawLength, s.crc, s.storedLength, s.iv)(data)
  }

  test("BufferResponse with a stored payload, compressed or not, round-trips with CRC and raw length") {
    val dir = Files.createTempDirectory("sluice-msg").toFile
    val file = PartitionedFile.create(new File(dir, "p.data"), 1, Some(BlockCodec.forSparkCodec("lz4", 1)))
    val compressible = Array.fill[Byte](3000)(7)
    val random = Array.tabulate[Byte](2000)(_ => Random.nextInt().toByte)
    Seq(compressible, random).foreach { a =>
      val b = Unpooled.directBuffer(a.length).writeBytes(a)
      file.write(0, b); b.release()
    }
    file.finishWriting()
    val r = new TestingReceivers()
    val spilled = Seq(file.buffer(0, 0), file.buffer(0, 1))
    assert(spilled(0).isCompressed && !spilled(1).isCompressed)
    val sent = spilled.zipWithIndex.map { case (s, i) => storedResponse(r.channels.head.id, i, 1 - i, s) }
    val got = decodeAll(r.clientChannel(), encode(sent: _*), chunked = true).map(_.asInstanceOf[BufferResponse])
    assert(got == sent)
    assert(got(0).compressed && got(0).rawLength == 3000 && got(0).hasChecksum && got(0).crc == spilled(0).crc)
    assert(!got(1).compressed && got(1).rawLength == -1 && got(1).payloadSize == 2000)
    assert(contents(got(1).data).sameElements(random))
    val stored = Unpooled.directBuffer(spilled(0).storedLength); spilled(0).readInto(stored)
    assert(contents(got(0).data).sameElements(contents(stored)))
    stored.release(); got.foreach(_.data.release())
    r.close(); file.delete(); dir.delete()
  }

  test("BufferResponses of an encrypted file carry their IV at the end of the header; plain ones beside them do not") {
    val dir = Files.createTempDirectory("sluice-msg").toFile
    val cipher = PartitionedFileCipher(Array.fill[Byte](16)(9), "AES/CTR/NoPadding")
    val encrypted = PartitionedFile.create(new File(dir, "e.data"), 1, Some(BlockCodec.forSparkCodec("lz4", 1)), Some(cipher))
    val plain = PartitionedFile.create(new File(dir, "p.data"), 1, None)
    for (f <- Seq(encrypted, plain);
      a <- Seq(Array.fill[Byte](3000)(7), Array.tabulate[Byte](2000)(_ => Random.nextInt().toByte))) {
      val b = Unpooled.directBuffer(a.length).writeBytes(a)
      f.write(0, b); b.release()
    }
    Seq(encrypted, plain).foreach(_.finishWriting())
    val r = new TestingReceivers()
    val spilled = Seq(encrypted.buffer(0, 0), plain.buffer(0, 0), encrypted.buffer(0, 1), plain.buffer(0, 1))
    assert(spilled.map(_.isEncrypted) == Seq(true, false, true, false))
    val sent = spilled.zipWithIndex.map { case (s, i) => storedResponse(r.channels.head.id, i, 3 - i, s) }
    assert(sent.map(_.encodedLength) == Seq(1, 0, 1, 0).map(BufferResponse.HeaderLength + _ * BufferIv.Length))
    val encoded = encode(sent: _*)
    assert(encoded.length == sent.map(_.frameLength).sum)
    val got = decodeAll(r.clientChannel(), encoded, chunked = true).map(_.asInstanceOf[BufferResponse])
    assert(got == sent, "headers, IVs included")
    assert(got(0).iv == spilled(0).iv && got(2).iv == spilled(2).iv && got(1).iv == null)
    got.zip(spilled).foreach { case (m, s) =>
      val stored = Unpooled.directBuffer(s.storedLength); s.readInto(stored)
      assert(contents(m.data).sameElements(contents(stored)), "the payload is the file's bytes, as stored")
      stored.release(); m.data.release()
    }
    r.close(); encrypted.delete(); plain.delete(); dir.delete()
  }

  test("every message id round-trips through the decoder of its direction, and the id table is the documented one") {
    val r = new TestingReceivers()
    val receiver = r.channels.head.id
    val one: Seq[NettyMessage] = Seq(
      PartitionRequest(ResultPartitionID(3, 1L), 0, 1, id, 2, creditBased = true, waitForProducer = false),
      BufferResponse(receiver, 0, 1, 0, bytes(Array.tabulate[Byte](300)(_.toByte))),
      ErrorResponse(Some(receiver), ErrorKind.ProducerFailed, "java.io.IOException", "gone"),
      CancelPartitionRequest(id),
      CloseRequest,
      AddCredit(id, 3),
      EndOfPartition(receiver, 2, 0),
      Ping(5L),
      Pong(5L),
      MultiPartitionRequest(id, 2, creditBased = true, Vector(RequestedSubpartitions(ResultPartitionID(3, 7L), 0, 4))),
      PackedBufferResponse(receiver, 3, 0, Vector(PackedEntry.end(0, 0), PackedEntry.end(1, 2)), 0)(null))
    // A packed frame whose entries carry IVs (fewer entries than its table's bytes could hold plain ones).
    val encrypted = PackedBufferResponse(receiver, 4, 1,
      Vector(
        PackedEntry(1, 2, isEnd = false, compressed = true, hasChecksum = true, 700, 11, 200, BufferIv(5L, 6L)),
        PackedEntry(1, 3, isEnd = false, compressed = false, hasChecksum = true, -1, 12, 100, BufferIv(7L, 8L)),
        PackedEntry.end(1, 3)), 300)(bytes(Array.tabulate[Byte](300)(i => (i * 7).toByte)))
    val ids = (0 to 10).map(_.toByte)
    assert(one.map(_.id) == ids, "one message of each id, in id order")
    assert(ids.forall(i => NettyMessage.typeOf(i).Id == i) && NettyMessage.typeOf(11.toByte) == null &&
      NettyMessage.typeOf(-1.toByte) == null)
    assert(
      NettyMessage.ClientToServer ++ NettyMessage.ServerToClient == ids.toSet &&
        NettyMessage.ClientToServer.intersect(NettyMessage.ServerToClient).isEmpty, "every id has exactly one direction")
    for (m <- one :+ encrypted) {
      val toServer = NettyMessage.ClientToServer(m.id)
      val ch = if (toServer) TestingReceivers.serverChannel() else r.clientChannel()
      val got = decodeAll(ch, encode(m), chunked = true)
      assert(got == Seq(m), s"${NettyMessage.nameOf(m.id)} round-trips")
      assert(got.head.getClass == m.getClass && NettyMessage.nameOf(m.id) == m.getClass.getSimpleName.stripSuffix("$"))
      got.head match {
        case p: PayloadResponse => p.data.release()
        case _ => ()
      }
      assert(!ch.finish())
    }
    r.close()
    // docs/wire-protocol.md's table: "| id | `Name` | direction | ..."
    val lines = scala.util.Using.resource(scala.io.Source.fromFile("docs/wire-protocol.md", "UTF-8"))(_.getLines().toList)
    val documented = lines
      .collect { case l if l.matches("""\| \d+ \| `\w+` \|.*""") => l.split("\\|").map(_.trim) }
      .map(c => (c(1).toInt, c(2).stripPrefix("`").stripSuffix("`"), c(3).startsWith("client"))).toSeq
    assert(documented == ids.map(i => (i.toInt, NettyMessage.nameOf(i), NettyMessage.ClientToServer(i))))
  }

  test("Ping and Pong are frames of 17 bytes carrying the sequence number the Pong echoes") {
    val ping = encode(Ping(0x0102030405060708L))
    assert(ping.length == NettyMessage.FrameHeaderLength + 8)
    val b = java.nio.ByteBuffer.wrap(ping)
    assert(b.getInt(0) == 17 && b.getInt(4) == NettyMessage.Magic && b.get(8) == Ping.Id && b.getLong(9) == 0x0102030405060708L)
    val pong = java.nio.ByteBuffer.wrap(encode(Pong(42L)))
    assert(pong.getInt(0) == 17 && pong.get(8) == Pong.Id && pong.getLong(9) == 42L)
    assert(Ping.Id != Pong.Id && (0 to 6).forall(i => i != Ping.Id && i != Pong.Id), "new ids, never reused")
  }

  test("error kinds: codes never reused, whether the data is lost, and a later server's kind read as lost data") {
    assert(ErrorKind.all.map(_.code) == (0 to 5).map(_.toByte))
    assert(ErrorKind.all.filterNot(_.lostData) == Seq(ErrorKind.ServerError, ErrorKind.Refused))
    val later = encode(ErrorResponse(Some(id), ErrorKind.Other, "c", "m"))
    later(NettyMessage.FrameHeaderLength + 1 + InputChannelID.Length) = 77
    val body = later.length - NettyMessage.FrameHeaderLength
    val decoded = ErrorResponse.decode(Unpooled.wrappedBuffer(later, NettyMessage.FrameHeaderLength, body), body)
    assert(decoded.kind == ErrorKind.Unknown(77) && decoded.kind.lostData && decoded.message == "m")
  }

  test("an ErrorResponse names the input of a missing partition; the frame limit covers the largest frame a server builds") {
    val missing = ErrorResponse(id, ErrorKind.PartitionNotFound,
      new io.sluice.partition.PartitionNotFoundException(ResultPartitionID(3, 4), input = 7))
    assert(missing.input == 7 && missing.message.contains("input 7"))
    assert(ErrorResponse(id, ErrorKind.Other, new RuntimeException("x")).input == -1)
    val failed = ErrorResponse(id, ErrorKind.ProducerFailed,
      new io.sluice.partition.ProducerFailedException(ResultPartitionID(3, 4), null, input = 5))
    assert(failed.input == 5 && failed.message.contains("input 5"), failed)
    // The config check's overhead is exactly the largest header: a full table of encrypted entries.
    val largestHeader = NettyMessage.FrameHeaderLength + PackedBufferResponse.MaxHeaderLength
    assert(io.sluice.config.SluiceConf.MaxFrameOverhead == largestHeader)
    assert(largestHeader >= NettyMessage.FrameHeaderLength + BufferResponse.HeaderLength + BufferIv.Length)
    assert(largestHeader >= NettyMessage.FrameHeaderLength + ErrorResponse.MaxLength)
    // The request budget: the largest request, naming the longest producer executor id a node
    // service is sent, still fits one frame; one more input would not.
    for (limit <- Seq(13609L, 42281L, 64L << 10, 1L << 20)) {
      val n = MultiPartitionRequest.maxInputs(limit)
      def frameOf(inputs: Int) =
        NettyMessage.FrameHeaderLength + MultiPartitionRequest(id, 2, true,
          Vector.fill(inputs)(RequestedSubpartitions(
              ResultPartitionID(1, 1), 0, 1)), Some("e" * MultiPartitionRequest.MaxExecutorIdBytes)).encodedLength
      assert(frameOf(n) <= limit && frameOf(n + 1) > limit, s"$n inputs at $limit")
    }
  }

  test("long error texts are cut to their bounds without splitting a character") {
    val long = ErrorResponse(Some(id), ErrorKind.Other, "x" * 1000, "\u00e9" * 5000)
    val got = decodeAll(new TestingReceivers().clientChannel(), encode(long), chunked = false).head.asInstanceOf[ErrorResponse]
    assert(got.causeClass == "x" * ErrorResponse.MaxClassNameBytes)
    assert(got.message == "\u00e9" * (ErrorResponse.MaxMessageBytes / 2))
  }

  private def contents(b: ByteBuf): Array[Byte] = {
    val a = new Array[Byte](b.readableBytes()); b.getBytes(b.readerIndex(), a); a
  }
}
