package io.sluice.netty

import java.nio.file.Files

import scala.jdk.CollectionConverters._

import io.sluice.{NettyLeakDetection, TestingThreads}
import io.sluice.buffer.BlockCodec
import io.sluice.netty.TestingExecutor.{async, await, withExecutors}
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.GateInput
import org.scalatest.funsuite.AnyFunSuite

/**
 * The executor's network stack as a whole: its server and its client factory carry every gate and
 * shuffle between two executors over one connection, which Spark's authentication and encryption
 * guard.
 */
class NettyConnectionManagerSuite extends AnyFunSuite with NettyLeakDetection {

  private val crypto = Map("spark.network.crypto.enabled" -> "true")

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
          b.connectionManager.clientFactory.connection("127.0.0.1", a.port).exists(_.numChannels == 12)
        }
        val client = b.connectionManager.clientFactory.connection("127.0.0.1", a.port).get
        if (firstClient == null) firstClient = client else assert(client eq firstClient, "reused across shuffles")
        assert(client.numChannels == 12, "12 channels of 3 gates share the connection")
        assert(a.connectionManager.server.numAcceptedConnections == 1)
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

  test("with authentication and AES encryption on, pipelined and spilled data arrive intact") {
    val dir = Files.createTempDirectory("sluice-auth").toFile
    val a = new TestingExecutor("A", transportSettings = crypto, auth = TestingSecretKeyHolder.auth("s3cr3t"))
    val b = new TestingExecutor("B", transportSettings = crypto, auth = TestingSecretKeyHolder.auth("s3cr3t"))
    withExecutors(a, b) {
      val codec = Some(BlockCodec.forSparkCodec("lz4", 1))
      val pipelined = a.pipelinedPartition(ResultPartitionID(1, 0), 1)
      val blocking = a.blockingPartition(ResultPartitionID(1, 1), 1, codec)
      TestingRecords.writeMany(blocking, 0, 300, 700)
      a.finish(blocking)
      val reader = new TestingGateReader(b.gate("r",
          Vector(GateInput(pipelined.partitionId, 0, 1, a.location),
            GateInput(blocking.partitionId, 0, 1, a.location)), codec))
      val reading = async(reader.readAll())
      TestingRecords.writeMany(pipelined, 0, 500, 900)
      pipelined.finish()
      assert(await(reading) == Map((0L, 0) -> 500, (1L, 0) -> 300))
      val names = b.connectionManager.clientFactory.connection("127.0.0.1", a.port).get.channel.pipeline().names().asScala
      assert(names.exists(_.contains("Encryption")), s"the connection is encrypted: $names")
      reader.close()
      a.partitionManager.releasePartition(blocking.partitionId, null)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
    dir.delete()
  }
}
