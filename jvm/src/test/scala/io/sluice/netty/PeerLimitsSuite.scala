package io.sluice.netty

import java.net.{InetAddress, InetSocketAddress}

import scala.jdk.CollectionConverters._

import io.sluice.TestingThreads
import io.sluice.config.SluiceOptions
import io.sluice.netty.TestingExecutor.{async, await, withExecutors}
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.{GateInput, InputChannelException}
import org.scalatest.funsuite.AnyFunSuite

/**
 * What one remote host may hold on an executor's Sluice server (spark.authenticate off: anyone who
 * reaches the port may ask): a bounded number of connections and of readers, refused beyond with
 * errors naming the host and the key, while the executor's real readers keep getting their data.
 */
class PeerLimitsSuite extends AnyFunSuite {

  private val local = new InetSocketAddress(InetAddress.getLoopbackAddress, 40000)
  private val other = new InetSocketAddress(InetAddress.getByName("127.0.0.2"), 40000)

  test("connections and readers are counted per remote host and given back") {
    val limits = new PeerLimits(maxConnections = 2, maxReaders = 3)
    val p1 = limits.tryConnect(local)
    val p2 = limits.tryConnect(local)
    assert(p1 != null && (p1 eq p2))
    assert(limits.tryConnect(local) == null, "a third connection of the same host is refused")
    assert(limits.tryConnect(other) != null, "another host has its own share")
    assert((1 to 3).forall(_ => p1.tryAddReader()) && !p1.tryAddReader(), "three readers, not four")
    assert(
      p1.readerLimitMessage.contains("127.0.0.1") && p1.readerLimitMessage.contains(s"${SluiceOptions.MaxReadersPerPeer.key}=3"))
    p1.removeReader()
    assert(p1.tryAddReader())
    limits.disconnect(p1)
    assert(limits.connectionsOf(local.getAddress) == 1)
    limits.disconnect(p2)
    assert(limits.connectionsOf(local.getAddress) == 0 && limits.readersOf(local.getAddress) == 3, "readers outlive the close")
    (1 to 3).foreach(_ => p1.removeReader())
    assert(limits.numPeers == 1, "a host holding nothing is forgotten")
    assert(limits.tryConnect(new io.netty.channel.local.LocalAddress("x")) eq PeerLimits.Unlimited)
  }

  test("a host flooding the server with connections and partition requests hits the limits; real readers get exact data") {
    // Requests waiting for a producer wait longer than the test takes.
    val settings = Map(SluiceOptions.MaxConnectionsPerPeer.key -> "4", SluiceOptions.MaxReadersPerPeer.key -> "16",
      SluiceOptions.RequestTimeout.key -> "300s")
    val a = new TestingExecutor("A", settings)
    val b = new TestingExecutor("B")
    val flooder = new TestingFlooder(a.port)
    withExecutors(a, b) {
      try {
        val blocking = (0 until 3).map(i => a.blockingPartition(ResultPartitionID(1, i), 2, None))
        blocking.foreach { p => for (s <- 0 until 2) TestingRecords.writeMany(p, s, 400, 200); a.finish(p) }
        val pipelined = a.pipelinedPartition(ResultPartitionID(2, 5), 2)

        // The flood: one Sluice connection holding 16 readers (the partitions' ids are guessable; some
        // wait for producers that never come), 20 more requests, and 10 more raw connections.
        val ch = flooder.openSluiceConnection()
        for (i <- 0 until 36) {
          if (i % 4 == 3) flooder.request(ch, ResultPartitionID(9, i), waitForProducer = true)
          else flooder.request(ch, blocking(i % 3).partitionId)
        }
        val raw = flooder.openRawConnections(10)
        TestingThreads.eventually(what = "20 requests and 7 connections refused") {
          flooder.errors.size == 20 && a.counters.connectionsRefused.sum == 7
        }
        assert(a.connectionManager.server.peerUsage(flooder.inetAddress) == (4, 16), "the flooder holds its maximum")
        val closed = flooder.closedByServer(raw, 200)
        assert(closed.size == 7, s"${closed.size} of 10 raw connections closed by the server")
        flooder.errors.asScala.foreach { e =>
          assert(e.kind == ErrorKind.Refused && e.causeClass == classOf[PeerLimitException].getName)
          assert(e.message.contains("127.0.0.2") && e.message.contains(s"${SluiceOptions.MaxReadersPerPeer.key}=16"), e.message)
        }
        assert(a.counters.readersRefused.sum == 20)

        // Meanwhile a real executor reads everything, exactly, over its own connection.
        val inputs = blocking.flatMap(p => (0 until 2).map(s => GateInput(p.partitionId, s, s + 1, a.location))) ++
          (0 until 2).map(s => GateInput(pipelined.partitionId, s, s + 1, a.location))
        val reader = new TestingGateReader(b.gate("real", inputs.toVector))
        val reading = async(reader.readAll())
        for (s <- 0 until 2) TestingRecords.writeMany(pipelined, s, 500, 300)
        pipelined.finish()
        // (producer, subpartition) -> records: blocking producers 0-2, pipelined producer 5, in order, none missing.
        val expected =
          (0 until 3).flatMap(i => (0 until 2).map(s => (i.toLong, s) -> 400)) ++ (0 until 2).map(s => (5L, s) -> 500)
        assert(await(reading, 60000) == expected.toMap, "the real reader read everything")
        assert(flooder.errors.size == 20, "the flooder got nothing but its refusals")
        assert(a.connectionManager.server.peerUsage(InetAddress.getLoopbackAddress) == (1, 0),
          "the real reader's readers are done")
        reader.close()

        // The flood ends: the host's share is given back and it may connect again.
        flooder.close()
        TestingThreads.eventually(what = "the flooder's share given back") {
          a.connectionManager.server.peerUsage(flooder.inetAddress) == (0, 0) && a.counters.activeReaders.get == 0
        }
        val again = new TestingFlooder(a.port)
        try {
          again.openSluiceConnection()
          assert(a.connectionManager.server.peerUsage(again.inetAddress)._1 == 1)
        } finally again.close()
        a.assertNoCreditViolations()
        blocking.foreach(p => a.partitionManager.releasePartition(p.partitionId, null))
        a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
      } finally flooder.close()
    }
  }

  test("an executor beyond a host's connection limit fails with an error naming the key; the others read on") {
    val a = new TestingExecutor("A", Map(SluiceOptions.MaxConnectionsPerPeer.key -> "1"))
    val b = new TestingExecutor("B")
    val c = new TestingExecutor("C")
    withExecutors(a, b, c) {
      val p = a.blockingPartition(ResultPartitionID(1, 0), 1, None)
      TestingRecords.writeMany(p, 0, 300, 200)
      a.finish(p)
      val first = new TestingGateReader(b.gate("b", Vector(GateInput(p.partitionId, 0, 1, a.location))))
      assert(first.readAll() == Map((0L, 0) -> 300))
      first.close()
      val second = new TestingGateReader(c.gate("c", Vector(GateInput(p.partitionId, 0, 1, a.location))))
      val e = intercept[InputChannelException](second.readOne())
      assert(e.getMessage.contains("executor A") && e.getMessage.contains(SluiceOptions.MaxConnectionsPerPeer.key), e.getMessage)
      assert(second.recordsRead.get == 0 && a.counters.connectionsRefused.sum == 1)
      second.close()
      val again = new TestingGateReader(b.gate("b again", Vector(GateInput(p.partitionId, 0, 1, a.location))))
      assert(again.readAll() == Map((0L, 0) -> 300), "the executor within the limit reads on")
      again.close()
      a.partitionManager.releasePartition(p.partitionId, null)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack(); c.awaitAllBuffersBack()
    }
  }
}
