package io.sluice.netty

import io.sluice.{NettyLeakDetection, TestingThreads}
import io.sluice.netty.TestingExecutor.withExecutors
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.{GateInput, InputChannelException}
import org.scalatest.funsuite.AnyFunSuite

/** The server: it serves only clients that pass Spark's authentication, and its shutdown closes its connections and port. */
class NettyServerSuite extends AnyFunSuite with NettyLeakDetection {

  for ((what, clientAuth) <- Seq("the wrong secret" -> TestingSecretKeyHolder.auth("guess"), "no authentication" -> None)) {
    test(s"a client with $what is refused and receives no data") {
      val a = new TestingExecutor("A", auth = TestingSecretKeyHolder.auth("s3cr3t"))
      val c = new TestingExecutor("C", auth = clientAuth)
      withExecutors(a, c) {
        val p = a.pipelinedPartition(ResultPartitionID(1, 0), 1)
        TestingRecords.writeMany(p, 0, 20, 500)
        p.flushAll()
        val queued = p.numQueuedBuffers
        val reader = new TestingGateReader(c.gate("intruder", Vector(GateInput(p.partitionId, 0, 1, a.location))))
        val e = intercept[InputChannelException](reader.readOne())
        assert(e.getMessage.contains("executor A"), e.getMessage)
        assert(reader.recordsRead.get == 0)
        assert(a.counters.buffersSent.sum == 0 && a.counters.activeReaders.get == 0, "the server served nothing")
        assert(a.connectionManager.numServerConnections == 0, "the connection was never upgraded to Sluice")
        assert(p.numQueuedBuffers == queued)
        reader.close()
        a.partitionManager.releasePartition(p.partitionId, null); p.closeBufferBuilders()
        a.awaitAllBuffersBack(); c.awaitAllBuffersBack()
      }
    }
  }

  test("shutdown closes the served connections and the port") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      val client = b.connectionManager.createPartitionRequestClient("127.0.0.1", a.port)
      TestingThreads.eventually(what = "the connection served") { a.connectionManager.server.numConnections == 1 }
      val port = a.port
      TestingTcp.listeningOn(port).foreach(lines => assert(lines.size == 1, s"listening sockets on $port: $lines"))
      a.connectionManager.server.shutdown()
      TestingThreads.eventually(what = "the client sees its connection closed") { !client.isActive }
      // The server forgets a connection in its close listener, on the connection's event loop: the
      // client may see the close first.
      TestingThreads.eventually(what = "the server forgets its connections") {
        a.connectionManager.server.numConnections == 0 && a.connectionManager.server.numAcceptedConnections == 0
      }
      // The port is no longer ours: soon this JVM holds no listening socket on it. Not at once: the
      // JDK closes a channel registered with a selector (Netty's NIO transport) only when that
      // selector next runs, just after the close has completed for Netty and Spark. (Binding or
      // connecting to the number would not tell either: once free, any process on the machine may
      // take it, as a client's ephemeral port or a server's.)
      TestingTcp.listeningOn(port).foreach { _ =>
        TestingThreads.eventually(what = s"this JVM no longer listening on $port") {
          TestingTcp.listeningOn(port).exists(_.isEmpty)
        }
      }
      b.awaitAllBuffersBack()
    }
  }
}
