package io.sluice.netty

import java.io.{DataInputStream, EOFException, IOException}
import java.net.{Socket, SocketTimeoutException}
import java.nio.ByteBuffer
import java.util.concurrent.atomic.{AtomicInteger, AtomicLong}

import scala.util.Random

import io.sluice.NettyLeakDetection
import io.sluice.netty.TestingExecutor.{async, await, withExecutors}
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.GateInput
import org.scalatest.funsuite.AnyFunSuite

/**
 * The server against hostile peers: thousands of random, truncated and malformed frames and raw
 * random bytes on many raw TCP connections, while a well-behaved client on its own connection
 * keeps receiving correct data. The server must survive, close exactly the bad connections, leave
 * the good one alone, keep its memory bounded and leak no buffer.
 */
class PartitionRequestServerHandlerSuite extends AnyFunSuite with NettyLeakDetection {

  test("a server survives a fuzzing storm while a good client keeps receiving correct data") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      val p = a.pipelinedPartition(ResultPartitionID(1, 0), 1)
      val goodGate = b.gate("good", Vector(GateInput(p.partitionId, 0, 1, a.location)))
      // The good client's request is in before the storm: a fuzzer's valid PartitionRequest for the
      // same pipelined subpartition (read once) would otherwise win the race against the lazy gate.
      goodGate.requestPartitions()
      eventually(a.counters.activeReaders.get == 1, "the good client's request reached the server")
      val good = new TestingGateReader(goodGate)
      val records = 20000
      val reading = async(good.readAll())
      val producing = async {
        for (i <- 0 until records) {
          TestingRecords.write(p, 0, TestingRecords.record(0, 0, i, 64 + (i % 50) * 20))
          if (i % 500 == 0) p.flushAll()
        }
        p.finish()
      }

      val stats = new FuzzStats
      val fuzzers = (0 until 4).map(t => async(fuzz(a.port, new Random(1000 + t), connections = 90, stats)))
      fuzzers.foreach(f => await(f, 180000))

      assert(await(reading, 60000) == Map((0L, 0) -> records), "the good client read everything, intact and in order")
      await(producing)
      assert(stats.frames.get >= 2000, s"only ${stats.frames.get} frames thrown")
      assert(stats.expectedCloses.get > 100)
      assert(stats.closedByServer.get == stats.expectedCloses.get,
        s"${stats.expectedCloses.get - stats.closedByServer.get} bad connections stayed open")
      assert(a.counters.protocolErrors.sum >= stats.expectedCloses.get - stats.sparkLevel.get)
      eventually(a.connectionManager.server.numAcceptedConnections == 1,
        s"only the good connection stays: " +
          s"${a.connectionManager.server.numAcceptedConnections} open")
      assert(b.counters.protocolErrors.sum == 0 && b.counters.connectionsOpened.sum == 1,
        "the good connection was never disturbed")
      good.close()
      eventually(a.counters.activeReaders.get == 0, s"${a.counters.activeReaders.get} readers left on the server")
      assert(a.partitionManager.numPendingPartitions == 0, "no waiting request outlives its connection")
      a.assertNoCreditViolations(); b.assertNoCreditViolations()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  private final class FuzzStats {
    val frames = new AtomicLong
    val expectedCloses = new AtomicInteger
    val closedByServer = new AtomicInteger
    val sparkLevel = new AtomicInteger
  }

  /** Opens `connections` raw connections one after another and abuses each in a random way. */
  private def fuzz(port: Int, r: Random, connections: Int, stats: FuzzStats): Unit = {
    for (_ <- 0 until connections) {
      val s = new Socket("127.0.0.1", port)
      s.setSoTimeout(10000)
      try {
        r.nextInt(10) match {
          case 0 =>
            // Garbage before any upgrade: Spark's own frame decoder deals with it (and may wait for more).
            s.getOutputStream.write(Array.fill(1 + r.nextInt(64))(r.nextInt().toByte))
            stats.frames.incrementAndGet()
          case 1 =>
            upgrade(s)
            // A well-formed frame cut short, then the peer goes away.
            val f = validFrame(r)
            s.getOutputStream.write(f, 0, r.nextInt(f.length))
            stats.frames.incrementAndGet()
          case _ =>
            upgrade(s)
            val out = s.getOutputStream
            for (_ <- 0 until 5 + r.nextInt(20)) { out.write(validFrame(r)); stats.frames.incrementAndGet() }
            out.write(badFrame(r)); stats.frames.incrementAndGet()
            out.flush()
            stats.expectedCloses.incrementAndGet()
            if (readsToEnd(s)) stats.closedByServer.incrementAndGet()
        }
      } finally s.close()
    }
  }

  /** Upgrades a raw connection to Sluice by hand: Spark's RpcRequest frame, then its RpcResponse. */
  private def upgrade(s: Socket): Unit = {
    val body = NettyProtocol.upgradeRequest(NettyConnectionManager.DefaultAppId)
    val frame = ByteBuffer.allocate(8 + 1 + 8 + 4 + body.length)
    frame.putLong(frame.capacity()).put(3.toByte /* RpcRequest */ ).putLong(1L).putInt(body.length).put(body)
    s.getOutputStream.write(frame.array())
    val in = new DataInputStream(s.getInputStream)
    val length = in.readLong()
    val rest = new Array[Byte]((length - 8).toInt)
    in.readFully(rest)
    assert(rest(0) == 4, "an RpcResponse") // Spark's message type
    assert(new String(rest, 1 + 8 + 4, rest.length - 13, "US-ASCII") == "sluice/2 ok")
  }

  /** True when the server closes the connection (reading whatever it sent first). */
  private def readsToEnd(s: Socket): Boolean = {
    val in = s.getInputStream
    val buf = new Array[Byte](4096)
    try { while (in.read(buf) >= 0) (); true }
    catch {
      case _: SocketTimeoutException => false
      case _: EOFException | _: IOException => true // reset by the server
    }
  }

  private def randomId(r: Random) = InputChannelID(r.nextLong(), r.nextLong())

  /** Frames a correct server must accept without closing (answers are errors at most). */
  private def validFrame(r: Random): Array[Byte] = TestingReceivers.encode(r.nextInt(5) match {
    case 0 => PartitionRequest(ResultPartitionID(r.nextInt(), r.nextLong()), 0, 1 + r.nextInt(3), randomId(r),
        r.nextInt(5), r.nextBoolean(), r.nextBoolean())
    case 1 => AddCredit(randomId(r), 1 + r.nextInt(Int.MaxValue - 1))
    case 2 => CancelPartitionRequest(randomId(r))
    case 3 => Ping(r.nextLong()) // answered with a Pong
    case _ => PartitionRequest(ResultPartitionID(1, 0), 0, 1, randomId(r), 1, true, false) // already being read
  })

  /** Frames that must close the connection. */
  private def badFrame(r: Random): Array[Byte] = {
    val b = ByteBuffer.allocate(64 + r.nextInt(200))
    r.nextInt(8) match {
      case 0 => r.nextBytes(b.array()); b.putInt(4, r.nextInt() | 1) // random bytes, magic ruled out below
      case 1 => b.putInt(-1 - r.nextInt(1000)).putInt(NettyMessage.Magic).put(PartitionRequest.Id)
      case 2 => b.putInt((64 << 10) + 1 + r.nextInt(1 << 20)).putInt(NettyMessage.Magic).put(AddCredit.Id)
      case 3 => b.putInt(9 + r.nextInt(50)).putInt(NettyMessage.Magic).put((Pong.Id + 1 + r.nextInt(100)).toByte)
      case 4 => b.putInt(9 + BufferResponse.HeaderLength + 10).putInt(NettyMessage.Magic).put(BufferResponse.Id)
      case 5 => b.putInt(9 + 21 + r.nextInt(10)).putInt(NettyMessage.Magic).put(AddCredit.Id)
      case 6 => b.putInt(9 + 20).putInt(NettyMessage.Magic).put(AddCredit.Id).putLong(1).putLong(2).putInt(-r.nextInt(5))
      case _ => b.putInt(9).putInt(NettyMessage.Magic ^ (1 << r.nextInt(32))).put(CloseRequest.Id)
    }
    if (b.getInt(4) == NettyMessage.Magic && b.getInt(0) >= 9 && b.getInt(0) <= (64 << 10) && b.get(8) == CloseRequest.Id) {
      b.putInt(4, 0) // a random frame that happened to be a valid CloseRequest
    }
    b.array()
  }

  private def eventually(condition: => Boolean, what: => String, timeoutMs: Long = 15000): Unit = {
    val deadline = System.currentTimeMillis() + timeoutMs
    while (!condition && System.currentTimeMillis() < deadline) Thread.sleep(10)
    assert(condition, what)
  }
}
