package io.sluice.netty

import java.io.{File, IOException}
import java.nio.file.Files
import java.util.concurrent.CountDownLatch

import scala.jdk.CollectionConverters._

import io.sluice.NettyLeakDetection
import io.sluice.TestingThreads
import io.sluice.buffer.BlockCodec
import io.sluice.netty.TestingExecutor.{async, await, withExecutors}
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.{GateInput, InputChannelException}
import org.apache.spark.network.sasl.SecretKeyHolder
import org.scalatest.funsuite.AnyFunSuite

/** One connection per pair of executors, shared and reused; Spark's authentication and encryption guard it. */
class NettyConnectionManagerSuite extends AnyFunSuite with NettyLeakDetection {

  test("exactly one TCP connection between two executors, whatever the number of channels, gates and shuffles") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      var firstClient: PartitionRequestClient = null
      for (shuffle <- 1 to 2) {
        val parts = (0 until 4).map(i => a.pipelinedPartition(ResultPartitionID(shuffle, i), 3))
        val readers = (0 until 3).map(s =>
          new TestingGateReader(
            b.gate(s"shuffle $shuffle reader $s", parts.map(p => GateInput(p.partitionId, s, s + 1, a.location)))))
        // Gates request their channels on their first read.
        val reading = readers.map(r => async(r.readAll()))
        TestingThreads.eventually(what = "12 channels on the connection") {
          b.connectionManager.clientConnection("127.0.0.1", a.port).exists(_.numChannels == 12)
        }
        val client = b.connectionManager.clientConnection("127.0.0.1", a.port).get
        if (firstClient == null) firstClient = client else assert(client eq firstClient, "reused across shuffles")
        assert(client.numChannels == 12, "12 channels of 3 gates share the connection")
        assert(a.connectionManager.numAcceptedConnections == 1)
        assert(a.connectionManager.numServerConnections == 1)
        assert(b.connectionManager.numClientConnections == 1)
        assert(b.counters.connectionsOpened.sum == 1)
        TestingTcp.assertOneConnectionTo(a.port)
        parts.foreach { p => for (s <- 0 until 3) TestingRecords.writeMany(p, s, 200, 300); p.finish() }
        reading.foreach(r => assert(await(r).values.sum == 800))
        readers.foreach(_.close())
        assert(client.numChannels == 0)
      }
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
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
      assert(a.connectionManager.numAcceptedConnections == 1)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a server nobody listens on fails the connection attempt in time, naming the address") {
    val b = new TestingExecutor("B")
    val port = {
      val s = new java.net.ServerSocket(0);
      try s.getLocalPort
      finally s.close()
    }
    withExecutors(b) {
      val e = intercept[IOException](b.connectionManager.createPartitionRequestClient("127.0.0.1", port))
      assert(e.getMessage.contains(s"127.0.0.1:$port"), e.getMessage)
      val reader = new TestingGateReader(b.gate("r",
          Vector(GateInput(ResultPartitionID(1, 0), 0, 1,
              io.sluice.partition.consumer.ProducerLocation("gone", "127.0.0.1", port)))))
      val ce = intercept[InputChannelException](reader.readOne())
      assert(ce.getMessage.contains("executor gone") && ce.getMessage.contains(s"127.0.0.1:$port"), ce.getMessage)
      reader.close()
      b.awaitAllBuffersBack()
    }
  }

  private val appId = "app-20261122-0001"
  private def secret(s: String): Option[(SecretKeyHolder, String)] = Some((new TestingSecretKeyHolder(s), appId))
  private val crypto = Map("spark.network.crypto.enabled" -> "true")

  test("with authentication and AES encryption on, pipelined and spilled data arrive intact") {
    val dir = Files.createTempDirectory("sluice-auth").toFile
    val a = new TestingExecutor("A", transportSettings = crypto, auth = secret("s3cr3t"))
    val b = new TestingExecutor("B", transportSettings = crypto, auth = secret("s3cr3t"))
    withExecutors(a, b) {
      val codec = Some(BlockCodec.forSparkCodec("lz4", 1))
      val pipelined = a.pipelinedPartition(ResultPartitionID(1, 0), 1)
      val blocking = a.blockingPartition(ResultPartitionID(1, 1), 1, codec)
      TestingRecords.writeMany(blocking, 0, 300, 700)
      blocking.finish()
      val reader = new TestingGateReader(b.gate("r",
          Vector(GateInput(pipelined.partitionId, 0, 1, a.location),
            GateInput(blocking.partitionId, 0, 1, a.location)), codec))
      val reading = async(reader.readAll())
      TestingRecords.writeMany(pipelined, 0, 500, 900)
      pipelined.finish()
      assert(await(reading) == Map((0L, 0) -> 500, (1L, 0) -> 300))
      val names = b.connectionManager.clientConnection("127.0.0.1", a.port).get.channel.pipeline().names().asScala
      assert(names.exists(_.contains("Encryption")), s"the connection is encrypted: $names")
      reader.close()
      a.partitionManager.releasePartition(blocking.partitionId, null)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
    dir.delete()
  }

  test("a task interrupted while its connection is being opened leaves no poisoned connection: the next reader gets it") {
    val serverAuthenticating = new CountDownLatch(1)
    val letAuthenticate = new CountDownLatch(1)
    // The server's authentication (on its event loop) waits: the connection attempt is in flight.
    val slowKeys = new SecretKeyHolder {
      override def getSaslUser(appId: String): String = "sparkSaslUser"
      override def getSecretKey(appId: String): String = {
        serverAuthenticating.countDown()
        letAuthenticate.await(60, java.util.concurrent.TimeUnit.SECONDS)
        "s3cr3t"
      }
    }
    val a = new TestingExecutor("A", auth = Some((slowKeys, appId)))
    val b = new TestingExecutor("B", auth = secret("s3cr3t"))
    withExecutors(a, b) {
      val interrupted = new TestingTaskThread(b.connectionManager.createPartitionRequestClient("127.0.0.1", a.port))
      assert(serverAuthenticating.await(60, java.util.concurrent.TimeUnit.SECONDS), "the attempt reached the server")
      interrupted.interrupt()
      val e = interrupted.failure(60000)
      assert(e.isInstanceOf[java.io.InterruptedIOException], e)
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
      assert(b.connectionManager.clientConnection("127.0.0.1", a.port).get eq client)
      assert(b.counters.connectionsOpened.sum == 1 && b.connectionManager.numClientConnections == 1)
      assert(a.connectionManager.numAcceptedConnections == 1 && a.connectionManager.numServerConnections == 1)
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
      assert(e.isInstanceOf[java.io.InterruptedIOException], e)
      val client = b.connectionManager.createPartitionRequestClient("127.0.0.1", a.port)
      assert(client.isActive && b.counters.connectionsOpened.sum == 1 && a.connectionManager.numAcceptedConnections == 1)
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

  for ((what, clientAuth) <- Seq("the wrong secret" -> secret("guess"), "no authentication" -> None)) {
    test(s"a client with $what is refused and receives no data") {
      val a = new TestingExecutor("A", auth = secret("s3cr3t"))
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
}

/** Spark's secret lookup for tests: one secret for every application. */
final class TestingSecretKeyHolder(secret: String) extends SecretKeyHolder {
  override def getSaslUser(appId: String): String = "sparkSaslUser"
  override def getSecretKey(appId: String): String = secret
}

/** A task thread of its own (so that a test can interrupt it) running `body` once. */
final class TestingTaskThread(body: => Any) {
  @volatile private var error: Throwable = _
  @volatile private var interruptedAtEnd = false
  private val thread = new Thread(() => {
      try body
      catch { case e: Throwable => error = e }
      interruptedAtEnd = Thread.currentThread().isInterrupted
    }, "sluice-test-interrupted-task")
  thread.setDaemon(true)
  thread.start()

  def interrupt(): Unit = thread.interrupt()

  /** What `body` threw (fails when it returned or did not end within `timeoutMs`). */
  def failure(timeoutMs: Long): Throwable = {
    thread.join(timeoutMs)
    assert(!thread.isAlive, s"the task did not end within ${timeoutMs}ms")
    assert(error != null, "the task returned without failing")
    error
  }

  def wasInterruptedAtEnd: Boolean = interruptedAtEnd
}

/** What the kernel says about TCP connections (Linux). */
object TestingTcp {

  /**
   * The established TCP connections this JVM holds to `port` (their client ends, as /proc/net/tcp
   * lines), or None without /proc. Only sockets of this process count: /proc/net/tcp lists the
   * whole machine, where another test run may connect to a port number it saw free a moment ago
   * and that is now one of ours (seen under dev/stress with other JVM suites running alongside).
   */
  def establishedTo(port: Int): Option[Seq[String]] = {
    val files = Seq(new File("/proc/net/tcp"), new File("/proc/net/tcp6")).filter(_.canRead)
    val fds = new File("/proc/self/fd")
    if (files.isEmpty || !fds.canRead) None
    else {
      val ours = Option(fds.listFiles()).toSeq.flatten.flatMap { fd =>
        try {
          val target = Files.readSymbolicLink(fd.toPath).toString
          if (target.startsWith("socket:[")) Some(target.stripPrefix("socket:[").stripSuffix("]")) else None
        } catch { case _: IOException => None } // closed meanwhile
      }.toSet
      Some(files.flatMap { f =>
        Files.readAllLines(f.toPath).asScala.drop(1).filter { l =>
          // sl, local address, remote address, state, queues, timer, retransmits, uid, timeout, inode
          val cols = l.trim.split("\\s+")
          cols.length > 9 && cols(3) == "01" && Integer.parseInt(cols(2).split(":")(1), 16) == port && ours(cols(9))
        }
      })
    }
  }

  /** Asserts that this JVM holds exactly one connection to `port` (where /proc says). */
  def assertOneConnectionTo(port: Int): Unit = establishedTo(port).foreach { lines =>
    assert(lines.size == 1, s"/proc/net/tcp shows ${lines.size} connections of this JVM to $port:\n${lines.mkString("\n")}")
  }
}
