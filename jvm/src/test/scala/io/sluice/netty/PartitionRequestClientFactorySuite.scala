package io.sluice.netty

import java.io.{IOException, InterruptedIOException}
import java.net.{InetAddress, ServerSocket}
import java.util.concurrent.{CountDownLatch, TimeUnit}

import io.sluice.{NettyLeakDetection, TestingThreads}
import io.sluice.config.SluiceOptions
import io.sluice.netty.TestingExecutor.{async, await, withExecutors}
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.{GateInput, InputChannelException, ProducerLocation}
import org.apache.spark.network.sasl.SecretKeyHolder
import org.scalatest.funsuite.AnyFunSuite

/**
 * The client's connection cache: one connection per remote server, shared by concurrent first
 * requests and reused until it closes; connection attempts that fail or time out name the server,
 * and an interrupted task leaves the attempt to the next reader.
 */
class PartitionRequestClientFactorySuite extends AnyFunSuite with NettyLeakDetection {

  test("one connection per server, reused by every request until it closes, then opened anew") {
    val a = new TestingExecutor("A")
    val c = new TestingExecutor("C")
    val b = new TestingExecutor("B")
    withExecutors(a, b, c) {
      val factory = b.connectionManager.clientFactory
      val toA = factory.createPartitionRequestClient("127.0.0.1", a.port)
      val toC = factory.createPartitionRequestClient("127.0.0.1", c.port)
      assert(toA ne toC, "a connection of its own per server")
      assert(toA.remoteString == s"127.0.0.1:${a.port}" && toC.remoteString == s"127.0.0.1:${c.port}")
      assert((1 to 5).forall(_ => factory.createPartitionRequestClient("127.0.0.1", a.port) eq toA), "reused")
      assert(factory.connection("127.0.0.1", a.port).contains(toA))
      assert(factory.numConnections == 2 && b.counters.connectionsOpened.sum == 2)
      TestingTcp.assertOneConnectionTo(a.port)

      toA.channel.close().syncUninterruptibly()
      TestingThreads.eventually(what = "the closed connection forgotten") {
        factory.connection("127.0.0.1", a.port).isEmpty
      }
      val again = factory.createPartitionRequestClient("127.0.0.1", a.port)
      assert((again ne toA) && again.isActive, "a closed connection is replaced by a new one")
      assert(factory.numConnections == 2 && b.counters.connectionsOpened.sum == 3)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack(); c.awaitAllBuffersBack()
    }
  }

  test("a prepared connection opens before any reader, serves the first reader and closes at shutdown") {
    val a = new TestingExecutor("A")
    val c = new TestingExecutor("C")
    val b = new TestingExecutor("B")
    val factory = b.connectionManager.clientFactory
    var prepared: PartitionRequestClient = null
    withExecutors(a, c) {
      try {
        assert(b.connectionManager.prepareConnection("127.0.0.1", a.port), "an attempt is started")
        TestingThreads.eventually(what = "the prepared connection open") {
          factory.connection("127.0.0.1", a.port).exists(_.isActive)
        }
        prepared = factory.connection("127.0.0.1", a.port).get
        assert(a.connectionManager.server.numAcceptedConnections == 1)
        assert(!b.connectionManager.prepareConnection("127.0.0.1", a.port), "one is held: nothing to prepare")
        assert(!b.connectionManager.prepareConnection("127.0.0.1", b.port), "never to its own server")
        assert(factory.createPartitionRequestClient("127.0.0.1", a.port) eq prepared, "the first reader reuses it")
        assert(b.counters.connectionsOpened.sum == 1 && factory.numConnections == 1)
        assert(a.connectionManager.server.numAcceptedConnections == 1)
        // A real read runs on it: a map output of A read by a gate of B.
        val p = a.blockingPartition(ResultPartitionID(1, 0), 1, None)
        TestingRecords.writeMany(p, 0, 10, 64)
        a.finish(p)
        val reader = new TestingGateReader(b.gate("r", Vector(GateInput(p.partitionId, 0, 1, a.location))))
        assert(reader.readAll() == Map((0L, 0) -> 10))
        reader.close()
        a.partitionManager.releasePartition(p.partitionId, null)
        assert(b.counters.connectionsOpened.sum == 1, "no second connection")
        // A server nobody listens on: the prepared attempt fails and is forgotten, the caller never waits.
        val gone = {
          val s = new ServerSocket(0);
          try s.getLocalPort
          finally s.close()
        }
        assert(factory.prepareConnection("127.0.0.1", gone))
        TestingThreads.eventually(what = "the failed attempt forgotten") { factory.connection("127.0.0.1", gone).isEmpty }
        a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
      } finally b.shutdown()
      assert(!prepared.isActive, "shutdown closed the prepared connection")
      assert(!factory.prepareConnection("127.0.0.1", c.port), "nothing is prepared after shutdown")
    }
  }

  test("prepareConnection stops at MaxPreparedConnections; readers still connect beyond it") {
    val servers = (0 to PartitionRequestClientFactory.MaxPreparedConnections).map(i => new TestingExecutor(s"S$i"))
    val b = new TestingExecutor("B")
    withExecutors(servers :+ b: _*) {
      val factory = b.connectionManager.clientFactory
      val started = servers.map(s => factory.prepareConnection("127.0.0.1", s.port))
      assert(started.count(identity) == PartitionRequestClientFactory.MaxPreparedConnections && !started.last)
      TestingThreads.eventually(what = "the prepared connections open") {
        factory.numConnections == PartitionRequestClientFactory.MaxPreparedConnections
      }
      assert(factory.createPartitionRequestClient("127.0.0.1", servers.last.port).isActive)
      assert(factory.numConnections == PartitionRequestClientFactory.MaxPreparedConnections + 1)
    }
  }

  test("concurrent first requests to one server share a single connection attempt") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      val start = new CountDownLatch(1)
      val clients =
        (0 until 16).map(_ => async { start.await(); b.connectionManager.createPartitionRequestClient("127.0.0.1", a.port) })
      start.countDown()
      val got = clients.map(await(_))
      assert(got.forall(_ eq got.head))
      assert(b.counters.connectionsOpened.sum == 1)
      assert(a.connectionManager.server.numAcceptedConnections == 1)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a server nobody listens on fails the connection attempt in time, naming the address") {
    val b = new TestingExecutor("B")
    val port = {
      val s = new ServerSocket(0);
      try s.getLocalPort
      finally s.close()
    }
    withExecutors(b) {
      val e = intercept[IOException](b.connectionManager.createPartitionRequestClient("127.0.0.1", port))
      assert(e.getMessage.contains(s"127.0.0.1:$port"), e.getMessage)
      val reader = new TestingGateReader(b.gate("r",
          Vector(GateInput(ResultPartitionID(1, 0), 0, 1,
              ProducerLocation("gone", "127.0.0.1", port)))))
      val ce = intercept[InputChannelException](reader.readOne())
      assert(ce.getMessage.contains("executor gone") && ce.getMessage.contains(s"127.0.0.1:$port"), ce.getMessage)
      reader.close()
      b.awaitAllBuffersBack()
    }
  }

  test("a server that accepts but never answers the upgrade fails the attempt after the connect timeout, naming it") {
    // The kernel completes the TCP handshake into the backlog; nobody ever reads the upgrade request.
    val deaf = new ServerSocket(0, 50, InetAddress.getLoopbackAddress)
    val b = new TestingExecutor("B", Map(SluiceOptions.ConnectTimeout.key -> "1s"))
    try {
      withExecutors(b) {
        val started = System.nanoTime()
        val e =
          intercept[IOException](b.connectionManager.clientFactory.createPartitionRequestClient("127.0.0.1", deaf.getLocalPort))
        val tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started)
        assert(
          e.getMessage.contains(s"127.0.0.1:${deaf.getLocalPort}") && e.getMessage.contains("Timed out after 1000ms") &&
            e.getMessage.contains("spark.sluice.network.connectTimeout"), e.getMessage)
        assert(tookMs >= 900 && tookMs < 30000, s"waited ${tookMs}ms")
        assert(b.connectionManager.clientFactory.numConnections == 0 && b.counters.connectionsOpened.sum == 0)
        b.awaitAllBuffersBack()
      }
    } finally deaf.close()
  }

  test("a task interrupted while its connection is being opened leaves no poisoned connection: the next reader gets it") {
    val serverAuthenticating = new CountDownLatch(1)
    val letAuthenticate = new CountDownLatch(1)
    // The server's authentication (on its event loop) waits: the connection attempt is in flight.
    val slowKeys = new SecretKeyHolder {
      override def getSaslUser(appId: String): String = "sparkSaslUser"
      override def getSecretKey(appId: String): String = {
        serverAuthenticating.countDown()
        letAuthenticate.await(60, TimeUnit.SECONDS)
        "s3cr3t"
      }
    }
    val a = new TestingExecutor("A", auth = Some((slowKeys, TestingSecretKeyHolder.AppId)))
    val b = new TestingExecutor("B", auth = TestingSecretKeyHolder.auth("s3cr3t"))
    withExecutors(a, b) {
      val interrupted = new TestingTaskThread(b.connectionManager.createPartitionRequestClient("127.0.0.1", a.port))
      assert(serverAuthenticating.await(60, TimeUnit.SECONDS), "the attempt reached the server")
      interrupted.interrupt()
      val e = interrupted.failure(60000)
      assert(e.isInstanceOf[InterruptedIOException], e)
      assert(e.getMessage.contains(s"127.0.0.1:${a.port}"), e.getMessage)
      assert(interrupted.wasInterruptedAtEnd, "the task thread keeps its interrupt status")

      val next = async(b.connectionManager.createPartitionRequestClient("127.0.0.1", a.port))
      letAuthenticate.countDown()
      val client = await(next, 60000)
      assert(client.isActive)
      val p = a.pipelinedPartition(ResultPartitionID(1, 0), 1)
      val reader = new TestingGateReader(b.gate("r", Vector(GateInput(p.partitionId, 0, 1, a.location))))
      val reading = async(reader.readAll())
      TestingRecords.writeMany(p, 0, 500, 300)
      p.finish()
      assert(await(reading) == Map((0L, 0) -> 500))
      assert(b.connectionManager.clientFactory.connection("127.0.0.1", a.port).get eq client)
      assert(b.counters.connectionsOpened.sum == 1 && b.connectionManager.numClientConnections == 1)
      assert(a.connectionManager.server.numAcceptedConnections == 1 && a.connectionManager.numServerConnections == 1)
      TestingTcp.assertOneConnectionTo(a.port)
      reader.close()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a task interrupted before it asks for a connection does not stop the attempt it started") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      val interrupted = new TestingTaskThread({
        Thread.currentThread().interrupt()
        b.connectionManager.createPartitionRequestClient("127.0.0.1", a.port)
      })
      val e = interrupted.failure(60000)
      assert(e.isInstanceOf[InterruptedIOException], e)
      val client = b.connectionManager.createPartitionRequestClient("127.0.0.1", a.port)
      assert(client.isActive && b.counters.connectionsOpened.sum == 1)
      // The server counts the connection when its event loop has accepted it, which may come just
      // after the client's connect completes.
      TestingThreads.eventually(what = "the server to accept the one connection") {
        a.connectionManager.server.numAcceptedConnections == 1
      }
      assert(a.connectionManager.server.numAcceptedConnections == 1)
      val p = a.pipelinedPartition(ResultPartitionID(1, 0), 1)
      val reader = new TestingGateReader(b.gate("r", Vector(GateInput(p.partitionId, 0, 1, a.location))))
      val reading = async(reader.readAll())
      TestingRecords.writeMany(p, 0, 100, 300)
      p.finish()
      assert(await(reading) == Map((0L, 0) -> 100))
      assert(b.counters.connectionsOpened.sum == 1)
      reader.close()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }
}
