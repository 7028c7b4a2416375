package io.sluice.netty

import java.io.IOException
import java.net.{InetAddress, Socket, SocketTimeoutException}
import java.nio.ByteBuffer

import scala.jdk.CollectionConverters._

import io.netty.channel.Channel
import io.netty.handler.ssl.SslHandler
import io.sluice.netty.TestingExecutor.{async, await, withExecutors}
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.{GateInput, InputChannelException, ProducerLocation}
import org.scalatest.funsuite.AnyFunSuite

/**
 * With Spark's TLS for RPC and block transfer on (spark.ssl.rpc.enabled), Sluice's connections are
 * TLS from their first byte: shown on the wire (a relay between two executors records both
 * directions), in the pipelines (Spark's SslHandler in front of Sluice's codec, a negotiated TLS
 * session on both ends), and by a plain-text client that gets nothing.
 */
class TlsTransportSuite extends AnyFunSuite {

  /** Bytes of two records the test writes in plain text: one pipelined, one spilled to a partition file. */
  private val pipelinedNeedle = TestingRecords.record(0, 0, 7, 300).slice(16, 80)
  private val spilledNeedle = TestingRecords.record(1, 0, 9, 300).slice(16, 80)

  /**
   * B reads a pipelined and a spilled (blocking) partition of A through a relay; returns what the
   * relay saw in each direction and checks the data arrived exactly.
   */
  private def exchangeThroughRelay(a: TestingExecutor, b: TestingExecutor)(
      inspect: (Channel, Channel) => Unit): (Array[Byte], Array[Byte]) = {
    val relay = new TestingTcpRelay(a.port)
    try {
      val viaRelay = ProducerLocation("A", "127.0.0.1", relay.port)
      val pipelined = a.pipelinedPartition(ResultPartitionID(1, 0), 1)
      val blocking = a.blockingPartition(ResultPartitionID(1, 1), 1, None)
      TestingRecords.writeMany(blocking, 0, 200, 300)
      a.finish(blocking)
      val reader = new TestingGateReader(b.gate("r",
          Vector(GateInput(pipelined.partitionId, 0, 1, viaRelay),
            GateInput(blocking.partitionId, 0, 1, viaRelay))))
      val reading = async(reader.readAll())
      TestingRecords.writeMany(pipelined, 0, 300, 300)
      pipelined.finish()
      assert(await(reading, 60000) == Map((0L, 0) -> 300, (1L, 0) -> 200), "every record arrived, in order")
      val client = b.connectionManager.clientFactory.connection("127.0.0.1", relay.port).get.channel
      val server = a.connectionManager.serverChannels
      assert(server.size == 1, s"one server connection: $server")
      inspect(client, server.head)
      reader.close()
      a.partitionManager.releasePartition(blocking.partitionId, null)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
      b.connectionManager.shutdown() // says goodbye and closes: the relay sees both ends finish
      assert(relay.awaitEnd(30000), "the relayed connection ended")
      assert(relay.numConnections == 1)
      relay.firstConnection
    } finally relay.close()
  }

  private def tlsSession(ch: Channel, side: String): javax.net.ssl.SSLSession = {
    val ssl = ch.pipeline().get(classOf[SslHandler])
    assert(ssl != null, s"$side: no SslHandler in ${ch.pipeline().names()}")
    val names = ch.pipeline().names().asScala
    assert(
      names.indexOf(ch.pipeline().context(ssl).name) < names.indexOf("sluiceDecoder") &&
        names.indexOf(ch.pipeline().context(ssl).name) < names.indexOf("sluiceEncoder"),
      s"$side: TLS sits in front of Sluice's codec: $names")
    assert(ssl.handshakeFuture().isDone && ssl.handshakeFuture().isSuccess, s"$side: the TLS handshake succeeded")
    val session = ssl.engine().getSession
    assert(session.getProtocol.startsWith("TLSv1."), s"$side: negotiated ${session.getProtocol}")
    assert(!session.getCipherSuite.contains("NULL") && !session.getCipherSuite.contains("anon"),
      s"$side: cipher suite ${session.getCipherSuite}")
    session
  }

  test("with spark.ssl.rpc.enabled both pipelines run TLS and everything on the wire is a TLS record") {
    val a = new TestingExecutor("A", transportSettings = TestingTls.settings)
    val b = new TestingExecutor("B", transportSettings = TestingTls.settings)
    withExecutors(a, b) {
      assert(a.connectionManager.isTls && b.connectionManager.isTls)
      val (up, down) = exchangeThroughRelay(a, b) { (client, server) =>
        val c = tlsSession(client, "client")
        val s = tlsSession(server, "server")
        assert(c.getProtocol == s.getProtocol && c.getCipherSuite == s.getCipherSuite, "both ends agree")
        assert(
          s.getLocalCertificates.head.asInstanceOf[java.security.cert.X509Certificate]
            .getSubjectX500Principal.getName == "CN=localhost", "the server presented the test's certificate")
      }
      // ClientHello first, ServerHello first: handshake records (22) of TLS 1.x.
      assert(up.length > 5 && up(0) == 0x16 && up(1) == 0x03, s"the client's first bytes: ${up.take(5).toSeq}")
      assert(down.length > 5 && down(0) == 0x16 && down(1) == 0x03, s"the server's first bytes: ${down.take(5).toSeq}")
      val upRecords = TestingTls.records(up, "client to server")
      val downRecords = TestingTls.records(down, "server to client")
      val dataBytes = downRecords.filter(_.contentType == 23).map(_.length.toLong).sum
      assert(dataBytes > 500L * 300, s"the records' bytes travelled as TLS application data ($dataBytes bytes)")
      assert(upRecords.exists(_.contentType == 23), "the requests travelled as TLS application data")
      Seq(pipelinedNeedle, spilledNeedle).foreach { needle =>
        assert(!TestingTls.contains(down, needle) && !TestingTls.contains(up, needle), "no record's bytes in plain text")
      }
      assert(a.counters.buffersSent.sum > 0 && a.counters.unreadablePayloads.sum == 0)
    }
  }

  test("the same exchange without TLS carries the records in plain text (the wire check can fail)") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      assert(!a.connectionManager.isTls)
      val (up, down) = exchangeThroughRelay(a, b) { (client, server) =>
        assert(client.pipeline().get(classOf[SslHandler]) == null && server.pipeline().get(classOf[SslHandler]) == null)
      }
      assert(down(0) != 0x16, "no TLS handshake")
      assert(intercept[Throwable](TestingTls.records(down, "server to client")).getMessage.contains("not a TLS"))
      assert(TestingTls.contains(down, pipelinedNeedle) && TestingTls.contains(down, spilledNeedle))
    }
  }

  test("a plain-text Sluice client is refused by a TLS server and receives no data") {
    val a = new TestingExecutor("A", transportSettings = TestingTls.settings)
    val c = new TestingExecutor("C")
    withExecutors(a, c) {
      val p = a.pipelinedPartition(ResultPartitionID(1, 0), 1)
      TestingRecords.writeMany(p, 0, 20, 500)
      p.flushAll()
      val queued = p.numQueuedBuffers
      val reader = new TestingGateReader(c.gate("plain", Vector(GateInput(p.partitionId, 0, 1, a.location))))
      val e = intercept[InputChannelException](reader.readOne())
      assert(e.getMessage.contains("executor A") && e.getMessage.contains(s"127.0.0.1:${a.port}"), e.getMessage)
      assert(e.getMessage.contains("spark.ssl.rpc.enabled"), s"the error points at the TLS setting: ${e.getMessage}")
      assert(reader.recordsRead.get == 0)
      assert(a.counters.buffersSent.sum == 0 && a.counters.activeReaders.get == 0, "the server served nothing")
      assert(a.connectionManager.numServerConnections == 0, "the connection was never upgraded to Sluice")
      assert(p.numQueuedBuffers == queued)
      reader.close()

      // The same request by hand: Spark's plain-text frame of the upgrade RPC. The server answers
      // nothing but TLS (at most an alert) and closes the connection.
      val socket = new Socket(InetAddress.getLoopbackAddress, a.port)
      try {
        socket.setSoTimeout(30000)
        socket.getOutputStream.write(plainUpgradeFrame)
        socket.getOutputStream.flush()
        val received =
          try socket.getInputStream.readAllBytes()
          catch {
            case _: SocketTimeoutException => fail("the server did not close the plain-text connection within 30s")
            case _: IOException => Array.emptyByteArray // reset: closed, nothing more to read
          }
        val records = TestingTls.records(received, "the server's answer to plain text")
        assert(records.forall(_.contentType == 21), s"nothing but TLS alerts: $records")
      } finally socket.close()
      assert(a.counters.buffersSent.sum == 0 && a.connectionManager.numServerConnections == 0)
      a.partitionManager.releasePartition(p.partitionId, null); p.closeBufferBuilders()
      a.awaitAllBuffersBack(); c.awaitAllBuffersBack()
    }
  }

  /** Spark's RpcRequest frame (length, type 3, request id, body length, body) of the Sluice upgrade. */
  private def plainUpgradeFrame: Array[Byte] = {
    val body = NettyProtocol.upgradeRequest(NettyConnectionManager.DefaultAppId)
    val frame = ByteBuffer.allocate(8 + 1 + 8 + 4 + body.length)
    frame.putLong(frame.capacity().toLong).put(3.toByte).putLong(1L).putInt(body.length).put(body)
    frame.array()
  }
}
