package io.sluice.netty

import java.net.InetSocketAddress

import io.netty.channel.embedded.EmbeddedChannel
import io.sluice.NettyLeakDetection
import io.sluice.memory.NetworkBufferPool
import io.sluice.netty.TestingReceivers.{bytes, encode}
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.{BufferAndAvailability, InputChannel, ProducerLocation, RemoteInputChannel, SingleInputGate}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Floating buffers of a credit-based remote channel, frame by frame: the sender's backlog asks
 * the gate's pool for floating buffers, announced as credit; a dry pool is waited on as a
 * listener; an exclusive buffer coming back takes a floating one's place, which goes back to the
 * pool ("A Deep-Dive into Flink's Network Stack", Credit-based Flow Control). The channel runs over
 * a real decoder and client handler on an EmbeddedChannel, whose outbound side is the wire.
 */
class FloatingBufferSuite extends AnyFunSuite with NettyLeakDetection {

  /**
   * A channel with `exclusive` exclusive buffers (0: floating only, its first credit a buffer of
   * the pool) and a gate pool of `floating`; with `poolDry` every pool buffer is taken by someone
   * else ([[othersBuffers]]) when the channel is requested.
   */
  private final class Client(exclusive: Int, floating: Int, poolDry: Boolean = false) {
    val networkBufferPool = new NetworkBufferPool(64, 4096)
    val pool = networkBufferPool.createBufferPool(1, floating, "test gate floating buffers")
    val othersBuffers = if (poolDry) Seq.fill(floating)(pool.requestBuffer()) else Nil
    val gate = new SingleInputGate("test gate", networkBufferPool, pool, None, 10000L, 10000L)
    val counters = new TransportCounters
    val handler = new CreditBasedPartitionRequestClientHandler("the server", counters)
    val wire = new EmbeddedChannel(new NettyMessageDecoder(NettyMessage.ServerToClient, 64 << 10, handler, counters), handler)
    private val client = new PartitionRequestClient(wire, handler, InetSocketAddress.createUnresolved("server", 1))
    val channel = new RemoteInputChannel(gate, 0, ResultPartitionID(1, 0), 0, 1, ProducerLocation("S", "server", 1),
      _ => client, creditBased = true, exclusive, false, 10000L)
    gate.setChannels(Array[InputChannel](channel))
    channel.requestSubpartitions()
    private var nextSeq = 0
    assert(wire.readOutbound[PartitionRequest]().credit == (if (exclusive > 0) exclusive else if (poolDry) 0 else 1))

    /** The server sends one buffer, with `backlog` more behind it. */
    def send(backlog: Int): Unit = {
      wire.writeInbound(bytes(encode(BufferResponse(channel.id, nextSeq, backlog, 0, bytes(Array.fill[Byte](100)(1))))))
      nextSeq += 1
    }

    /** Credit the client announced since the last call, as (AddCredit messages, total credit). */
    def announced(): Seq[Int] = Iterator.continually(wire.readOutbound[AnyRef]()).takeWhile(_ != null).collect {
      case AddCredit(id, c) if id == channel.id => c
    }.toSeq

    /** The task takes the next buffer off the channel (the caller releases it). */
    def take(): BufferAndAvailability = channel.getNextBuffer()

    def close(): Unit = {
      gate.close()
      wire.finishAndReleaseAll()
      assert(networkBufferPool.numberOfAvailableSegments == 64, "every segment came back")
      networkBufferPool.destroy()
    }
  }

  test("the sender's backlog makes the channel take floating buffers from its gate's pool and announce them") {
    val c = new Client(exclusive = 2, floating = 8)
    c.send(backlog = 4) // arrives in an exclusive buffer; 4 more follow
    assert(c.channel.numFloatingBuffersAvailable == 5, "backlog 4 + 2 exclusive buffers: 1 exclusive is free, 5 floating")
    assert(c.channel.numAvailableBuffers == 6)
    assert(c.pool.numUsedBuffers == 5)
    assert(c.announced() == Seq(5), "the floating buffers went to the sender as one AddCredit")
    (3 to 0 by -1).foreach(b => c.send(backlog = b)) // the 4 announced buffers arrive
    assert(c.channel.numBuffersReceived == 5 && c.channel.numCreditOverruns == 0)
    assert(c.announced().isEmpty, "a shrinking backlog asks for nothing more")
    val taken = Seq.fill(5)(c.take())
    taken.foreach(_.buffer.release())
    c.close()
  }

  test("buffers that arrive in one read tell the gate once, at the end of the read") {
    val c = new Client(exclusive = 2, floating = 8)
    val frames = Seq(1, 0).zipWithIndex.map { case (backlog, seq) =>
      encode(BufferResponse(c.channel.id, seq, backlog, 0, bytes(Array.fill[Byte](100)(seq.toByte))))
    }
    c.wire.pipeline().fireChannelRead(bytes(frames.flatten.toArray)) // one read from the socket, two buffers
    assert(c.channel.numBuffersReceived == 2)
    assert(c.gate.numDataNotifications == 0, "not told in the middle of the read")
    c.wire.pipeline().fireChannelReadComplete()
    assert(c.gate.numDataNotifications == 1, "told once at its end")
    val taken = Seq.fill(2)(c.take())
    assert(taken.forall(_ != null) && c.take() == null)
    taken.foreach(_.buffer.release())
    c.announced()
    c.close()
  }

  test("buffers decoded outside a read (no channelReadComplete follows) tell the gate from a task of the event loop") {
    val c = new Client(exclusive = 2, floating = 8)
    c.wire.pipeline().fireChannelRead(bytes(encode(BufferResponse(c.channel.id, 0, 0, 0, bytes(Array.fill[Byte](100)(1))))))
    assert(c.channel.numBuffersReceived == 1 && c.gate.numDataNotifications == 0)
    c.wire.runPendingTasks()
    assert(c.gate.numDataNotifications == 1, "the event loop's task told the gate")
    c.take().buffer.release()
    c.announced()
    c.close()
  }

  test("a dry floating pool is waited on as a listener: each buffer recycled to it becomes credit of the waiting channel") {
    val c = new Client(exclusive = 2, floating = 2) // a window of 2 + 2 buffers, free or unread
    c.send(backlog = 6) // wants 8 free buffers; the window has room for 3 beside the one received
    assert(c.channel.numFloatingBuffersAvailable == 2 && c.pool.numUsedBuffers == 2)
    assert(c.announced() == Seq(2))
    c.send(backlog = 5); c.send(backlog = 4) // into the two floating buffers
    assert(c.channel.numFloatingBuffersAvailable == 0)
    val first = c.take() // the exclusive buffer of message 0
    val second = c.take() // a floating one, now held by the task
    c.send(backlog = 3) // into the last free exclusive buffer: room for 2 free, and the pool is dry
    assert(c.channel.numAvailableBuffers == 0 && c.pool.numUsedBuffers == 2)
    second.buffer.release() // back to the gate's pool, which hands it to the waiting channel
    assert(c.channel.numFloatingBuffersAvailable == 1, "the recycled floating buffer went to the waiting channel")
    assert(c.announced() == Seq(1))
    first.buffer.release()
    Seq.fill(2)(c.take()).foreach(_.buffer.release())
    c.close()
  }

  test("an exclusive buffer coming back replaces a floating one once the backlog is gone; the floating one returns to the pool") {
    val c = new Client(exclusive = 2, floating = 8)
    c.send(backlog = 4)
    assert(c.announced() == Seq(5))
    (3 to 1 by -1).foreach(b => c.send(backlog = b)) // three of the five floating buffers filled
    c.send(backlog = 0) // the fourth; nothing more queued at the sender: 2 free buffers are enough
    assert(c.channel.numFloatingBuffersAvailable == 1 && c.channel.numAvailableBuffers == 2)
    assert(c.pool.numUsedBuffers == 5)
    val exclusive = c.take()
    exclusive.buffer.release()
    assert(c.channel.numAvailableBuffers == 2, "the channel keeps as many free buffers as the sender's credit")
    assert(c.channel.numFloatingBuffersAvailable == 0, "the free floating buffer gave way to the exclusive one")
    assert(c.pool.numUsedBuffers == 4, "and went back to the gate's pool for other channels")
    assert(c.announced().isEmpty, "a swap is no new credit")
    Seq.fill(4)(c.take()).foreach(_.buffer.release())
    assert(c.pool.numUsedBuffers == 0)
    c.close()
  }

  test("without exclusive buffers (past maxRequiredBuffersPerGate) the first credit is a floating buffer, and the " +
    "channel keeps one credit while its sender has data to come, whatever the backlog says") {
    val c = new Client(exclusive = 0, floating = 4) // the request carried one floating buffer as credit
    assert(c.channel.numExclusiveBuffers == 0 && c.pool.numUsedBuffers == 1)
    c.send(backlog = 0) // a packed sender's backlog is a lower bound: more may follow
    assert(c.announced() == Seq(1), "one credit again although the backlog is 0")
    c.take().buffer.release()
    c.send(backlog = 2)
    assert(c.announced() == Seq(2), "then as much as the backlog asks")
    Seq.fill(2)(c.send(backlog = 0)) // the window holds three unread buffers now
    assert(c.channel.numCreditOverruns == 0 && c.channel.numBuffersReceived == 4)
    assert(c.announced() == Seq(1), "still one credit, so the sender is never left without")
    Seq.fill(3)(c.take()).foreach(_.buffer.release())
    c.close()
  }

  test("without exclusive buffers, a dry pool at request time: the request carries no credit, and the buffer the " +
    "channel waited for is announced after it") {
    val c = new Client(exclusive = 0, floating = 2, poolDry = true)
    assert(c.announced().isEmpty)
    c.othersBuffers.head.release() // back to the pool, which hands it to the waiting channel
    assert(c.channel.numFloatingBuffersAvailable == 1)
    c.wire.runPendingTasks()
    assert(c.announced() == Seq(1), "announced once the request was out")
    c.send(backlog = 0)
    c.take().buffer.release()
    c.othersBuffers.tail.foreach(_.release())
    c.wire.runPendingTasks()
    assert(c.announced() == Seq(1))
    c.close()
  }
}
