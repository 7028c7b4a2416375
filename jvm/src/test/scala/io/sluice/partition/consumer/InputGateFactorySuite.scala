package io.sluice.partition.consumer

import java.io.RandomAccessFile

import io.sluice.buffer.BlockCodec
import io.sluice.config.SluiceOptions
import io.sluice.netty.{TestingExecutor, TestingGateReader, TestingRecords}
import io.sluice.netty.TestingExecutor.{async, await, withExecutors}
import io.sluice.partition.ResultPartitionID
import org.scalatest.funsuite.AnyFunSuite

/** Gates as the Spark layer builds them: local and remote channels, pipelined and blocking inputs. */
class InputGateFactorySuite extends AnyFunSuite {

  private def lz4 = Some(BlockCodec.forSparkCodec("lz4", 1))

  test("a gate reads local and remote pipelined inputs side by side") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      val remote = a.pipelinedPartition(ResultPartitionID(1, 0), 1)
      val local = b.pipelinedPartition(ResultPartitionID(1, 1), 1)
      val gate = b.gate("mixed", Vector(GateInput(remote.partitionId, 0, 1, a.location), GateInput(local.partitionId, 0, 1, b.location)))
      assert(gate.channel(0).isInstanceOf[RemoteInputChannel] && gate.channel(1).isInstanceOf[LocalInputChannel])
      val reader = new TestingGateReader(gate)
      val reading = async(reader.readAll())
      Seq(remote, local).foreach(p => async { TestingRecords.writeMany(p, 0, 3000, 250); p.finish() })
      assert(await(reading) == Map((0L, 0) -> 3000, (1L, 0) -> 3000))
      assert(gate.numBuffersInRemote.sum > 0 && gate.numBuffersInLocal.sum > 0)
      reader.close()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  for (ioMode <- Seq("NIO", "EPOLL")) test(s"spilled, compressed blocking partitions read remotely (FileRegion, $ioMode) " +
      "verify their checksums and can be read twice") {
    assume(ioMode == "NIO" || io.netty.channel.epoll.Epoll.isAvailable, "no native epoll here")
    val transport = Map("spark.sluice.io.mode" -> ioMode)
    val a = new TestingExecutor("A", transportSettings = transport)
    val b = new TestingExecutor("B", transportSettings = transport)
    withExecutors(a, b) {
      val parts = (0 until 2).map { i =>
        val p = a.blockingPartition(ResultPartitionID(2, i), 3, lz4)
        for (s <- 0 until 3) TestingRecords.writeMany(p, s, 400, 100 + 50 * s) // several spills through a 4-buffer pool
        p.finish()
        assert(p.numSpills > 1)
        p
      }
      val localToo = b.blockingPartition(ResultPartitionID(2, 9), 3, lz4)
      TestingRecords.writeMany(localToo, 1, 300, 200)
      localToo.finish()
      for (round <- 1 to 2) {
        val inputs = parts.map(p => GateInput(p.partitionId, 1, 3, a.location)) :+ GateInput(localToo.partitionId, 1, 2, b.location)
        val reader = new TestingGateReader(b.gate(s"round $round", inputs, lz4))
        assert(reader.readAll() == Map((0L, 1) -> 400, (0L, 2) -> 400, (1L, 1) -> 400, (1L, 2) -> 400, (9L, 1) -> 300))
        reader.close()
      }
      parts.foreach(p => a.partitionManager.releasePartition(p.partitionId, null))
      b.partitionManager.releasePartition(localToo.partitionId, null)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a corrupted spill file is detected by the remote consumer, naming the channel") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      for (codec <- Seq(None, lz4)) {
        val p = a.blockingPartition(ResultPartitionID(3, if (codec.isEmpty) 0 else 1), 1, codec)
        TestingRecords.writeMany(p, 0, 200, 300)
        p.finish()
        val raf = new RandomAccessFile(p.file.path, "rw")
        try { raf.seek(raf.length() / 2); val x = raf.read(); raf.seek(raf.length() / 2); raf.write(x ^ 0x5a) } finally raf.close()
        val reader = new TestingGateReader(b.gate("victim", Vector(GateInput(p.partitionId, 0, 1, a.location)), codec))
        val e = intercept[InputChannelException](while (reader.readOne()) ())
        assert(e.getCause.isInstanceOf[CorruptBufferException], e)
        assert(e.getMessage.contains("Checksum mismatch") && e.getMessage.contains("executor A"), e.getMessage)
        reader.close()
        a.partitionManager.releasePartition(p.partitionId, null)
      }
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("gate pools: credit-based gates float floatingBuffersPerGate; credit-less ones share the same total") {
    for (creditBased <- Seq(true, false)) {
      val a = new TestingExecutor("A")
      val b = new TestingExecutor("B", Map(SluiceOptions.CreditBased.key -> creditBased.toString,
        SluiceOptions.BuffersPerChannel.key -> "3", SluiceOptions.FloatingBuffersPerGate.key -> "5"))
      withExecutors(a, b) {
        val p = a.pipelinedPartition(ResultPartitionID(4, 0), 4)
        val gate = b.gate("sized", (0 until 4).map(s => GateInput(p.partitionId, s, s + 1, a.location)))
        val expectedMax = if (creditBased) 5 else 5 + 3 * 4
        assert(gate.floatingBuffers.maxNumberOfSegments == expectedMax)
        val exclusive = b.networkBufferPool.numberOfRequiredSegments - gate.floatingBuffers.numberOfRequiredSegments
        assert(exclusive == (if (creditBased) 12 else 0), "exclusive buffers are only taken with credit")
        gate.close()
        a.partitionManager.releasePartition(p.partitionId, null)
        a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
      }
    }
  }
}
