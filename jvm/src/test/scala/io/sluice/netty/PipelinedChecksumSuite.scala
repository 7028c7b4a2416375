package io.sluice.netty

import java.util.concurrent.ConcurrentLinkedQueue

import scala.jdk.CollectionConverters._

import io.netty.buffer.ByteBuf
import io.netty.channel.{ChannelHandlerContext, ChannelOutboundHandlerAdapter, ChannelPromise}
import io.sluice.{NettyLeakDetection, TestingThreads}
import io.sluice.netty.TestingExecutor.{async, await, withReaderAndProducer}
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.{CorruptBufferException, GateInput, InputChannelException}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Pipelined buffers cross the network with the CRC32C of their bytes when their partition asks for
 * it (Spark's spark.shuffle.streaming.checksum.enabled, on by default): a bit flipped on the way
 * fails the reading channel as a fetch failure naming it; with the setting off they carry none.
 * The producer on A, the reader on B, 4 KiB segments.
 */
class PipelinedChecksumSuite extends AnyFunSuite with NettyLeakDetection {

  /**
   * The last handler before the socket of a server connection: records the flags of every
   * BufferResponse frame it writes and flips one bit in the last payload byte of frame `flipAt`
   * (-1: none). A frame's header and its payload come as two writes, one after the other. Event
   * loop only, but for the flags other threads read.
   */
  private final class Wire(flipAt: Int) extends ChannelOutboundHandlerAdapter {
    val flags = new ConcurrentLinkedQueue[Integer]()
    private var frames = 0
    private var payloadNext = false
    private var flipPayload = false

    override def write(ctx: ChannelHandlerContext, msg: AnyRef, promise: ChannelPromise): Unit = msg match {
      case payload: ByteBuf if payloadNext =>
        payloadNext = false
        if (!flipPayload) ctx.write(payload, promise)
        else {
          val copy = ctx.alloc().buffer(payload.readableBytes())
          copy.writeBytes(payload, payload.readerIndex(), payload.readableBytes())
          payload.release()
          val last = copy.writerIndex() - 1
          copy.setByte(last, copy.getByte(last) ^ 0x10)
          ctx.write(copy, promise)
        }
      case header: ByteBuf
          if header.readableBytes() > Wire.FlagsAt &&
            header.getByte(header.readerIndex() + Wire.IdAt) == BufferResponse.Id =>
        flags.add(header.getByte(header.readerIndex() + Wire.FlagsAt) & 0xff)
        frames += 1
        payloadNext = true
        flipPayload = frames - 1 == flipAt
        ctx.write(header, promise)
      case other => ctx.write(other, promise)
    }
  }

  private object Wire {
    val IdAt = 8 // after the frame length and the magic
    val FlagsAt: Int = NettyMessage.FrameHeaderLength + InputChannelID.Length + 4 + 4 + 4
    val ChecksumFlag = 2
  }

  /** A pipelined partition on `a` read by a gate on `b`, requested, with `wire` at the head of A's connection. */
  private def connected(a: TestingExecutor, b: TestingExecutor, id: ResultPartitionID, checksums: Boolean, wire: Wire) = {
    val p = a.pipelinedPartition(id, 1, checksums = checksums)
    val gate = b.gate("reader", Vector(GateInput(p.partitionId, 0, 1, a.location)))
    gate.requestPartitions()
    TestingThreads.eventually(what = "A serves the reader")(a.counters.activeReaders.get == 1)
    a.connectionManager.serverChannels.head.pipeline().addFirst("test-wire", wire)
    (p, gate)
  }

  test("a bit flipped on the way in a pipelined buffer fails its channel as a fetch failure naming it") {
    withReaderAndProducer() { (a, b) =>
      val wire = new Wire(flipAt = 1)
      val (p, gate) = connected(a, b, ResultPartitionID(70, 0), checksums = true, wire)
      // Three buffers, which the partition's pool holds without waiting for its reader.
      TestingRecords.writeMany(p, 0, 20, 500)
      p.finish()
      val reader = new TestingGateReader(gate)
      val e = intercept[InputChannelException](reader.readAll())
      assert(e.getCause.isInstanceOf[CorruptBufferException], e)
      assert(e.getMessage.contains("Checksum mismatch") && e.getMessage.contains("executor A") &&
          e.getMessage.contains(p.partitionId.toString), e.getMessage)
      assert(reader.recordsRead.get < 20, "the corrupt buffer was not delivered as records")
      TestingThreads.eventually(what = "the buffers sent")(wire.flags.size >= 2)
      assert(wire.flags.asScala.forall(f => (f & Wire.ChecksumFlag) != 0), s"every buffer carried its checksum: ${wire.flags}")
      reader.close()
    }
  }

  test("the buffers carry checksums that check out; with Spark's setting off they carry none") {
    for (checksums <- Seq(true, false)) {
      withReaderAndProducer() { (a, b) =>
        val wire = new Wire(flipAt = -1)
        val (p, gate) = connected(a, b, ResultPartitionID(71, 0), checksums, wire)
        val producing = async { TestingRecords.writeMany(p, 0, 300, 700); p.finish(); p.awaitConsumed(30000) }
        val reader = new TestingGateReader(gate)
        assert(reader.readAll() == Map((0L, 0) -> 300))
        await(producing)
        reader.close()
        assert(wire.flags.size > 10, s"${wire.flags.size} buffers")
        assert(wire.flags.asScala.forall(f => ((f & Wire.ChecksumFlag) != 0) == checksums),
          s"checksums $checksums: flags ${wire.flags}")
      }
    }
  }
}
