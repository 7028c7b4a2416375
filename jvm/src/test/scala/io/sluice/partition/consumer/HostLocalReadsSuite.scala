package io.sluice.partition.consumer

import java.nio.file.Files

import io.sluice.NettyLeakDetection
import io.sluice.buffer.BlockCodec
import io.sluice.netty.{TestingExecutor, TestingGateReader, TestingRecords}
import io.sluice.netty.TestingExecutor.withExecutors
import io.sluice.partition.{PartitionedFile, PartitionedFileCipher, ResultPartitionID, SortMergeResultPartition}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Gates read the finished map outputs of another executor on their host from its files
 * (spark.shuffle.readHostLocalDisk): no connection, request or credit, the same records as from
 * its server, and the files stay its own.
 */
class HostLocalReadsSuite extends AnyFunSuite with NettyLeakDetection {

  private def lz4 = Some(BlockCodec.forSparkCodec("lz4", 1))

  /** A finished partition of `e` with 3 subpartitions: 400, 300 and 200 records of several sizes. */
  private def written(e: TestingExecutor, id: ResultPartitionID, codec: Option[BlockCodec] = lz4): SortMergeResultPartition = {
    val p = e.blockingPartition(id, 3, codec)
    for (s <- 0 until 3) TestingRecords.writeMany(p, s, 400 - 100 * s, 100 + 70 * s)
    e.finish(p)
  }

  /** Executors A and C serve their own outputs, B reads with host-local reads on; every buffer back after `body`. */
  private def withReaderBesideTwo(body: (TestingExecutor, TestingExecutor, TestingExecutor) => Unit): Unit = {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B", readHostLocal = true)
    val c = new TestingExecutor("C")
    withExecutors(a, b, c) {
      body(a, b, c)
      Seq(a, b, c).foreach(_.awaitAllBuffersBack())
    }
  }

  private def expected(ids: Seq[ResultPartitionID], start: Int, end: Int): Map[(Long, Int), Int] =
    (for (id <- ids; s <- start until end) yield (id.producerId, s) -> (400 - 100 * s)).toMap

  test("another executor's finished partitions are read from their files: no connection, no remote buffer") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B", readHostLocal = true)
    withExecutors(a, b) {
      b.readsFilesOf(a)
      val fromA = (0 until 3).map(i => written(a, ResultPartitionID(1, i)))
      val own = written(b, ResultPartitionID(1, 7))
      for (round <- 1 to 2) {
        val inputs = fromA.map(p => GateInput(p.partitionId, 1, 3, a.location)) :+ GateInput(own.partitionId, 1, 3, b.location)
        val gate = b.gate(s"round $round", inputs, lz4)
        val reader = new TestingGateReader(gate)
        assert(reader.readAll() == expected((fromA :+ own).map(_.partitionId), 1, 3))
        val channels = (0 until gate.numberOfChannels).map(gate.channel(_))
        assert(channels.count(_.producer.hostLocal) == 1 && channels.forall(_.isInstanceOf[LocalInputChannel]))
        assert(gate.numBuffersInRemote.sum == 0 && gate.numBuffersInLocal.sum > 0)
        reader.close()
      }
      assert(b.connectionManager.numClientConnections == 0, "nothing was asked of A's server")
      assert(a.counters.connectionsOpened.sum() == 0)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a gate that meets a new executor on its host asks for its dirs once, then reads its files") {
    withReaderBesideTwo { (a, b, c) =>
      val asked = new java.util.concurrent.atomic.AtomicInteger
      b.hostLocal.get.setRefresh { () => asked.incrementAndGet(); b.readsFilesOf(a) } // the driver knows A, not C
      val fromA = written(a, ResultPartitionID(5, 0))
      val fromC = written(c, ResultPartitionID(5, 1))
      for (round <- 1 to 2) {
        val gate = b.gate(s"round $round",
          Vector(GateInput(fromA.partitionId, 0, 3, a.location),
            GateInput(fromC.partitionId, 0, 3, c.location)), lz4)
        val reader = new TestingGateReader(gate)
        assert(reader.readAll() == expected(Seq(fromA.partitionId, fromC.partitionId), 0, 3))
        val channels = (0 until gate.numberOfChannels).map(gate.channel(_))
        assert(channels.map(c => (c.producer.executorId, c.producer.hostLocal)).toSet == Set(("A", true), ("C", false)))
        reader.close()
      }
      assert(asked.get == 2, "one question for A and one for C, none in the second round")
      // A producer on another host is never asked about.
      assert(!b.hostLocal.get.knowsOrLearns(a.location.copy(executorId = "D", host = "10.1.2.3")) && asked.get == 2)
    }
  }

  test("an executor whose dirs are unknown, or a map output not where its dirs put it, is read from its server") {
    val elsewhere = Files.createTempDirectory("sluice-not-a").toFile
    withReaderBesideTwo { (a, b, c) =>
      b.hostLocal.get.addExecutor("A", Seq(elsewhere)) // A's files are not there (say, moved to A from elsewhere)
      val fromA = written(a, ResultPartitionID(2, 0))
      val fromC = written(c, ResultPartitionID(2, 1))
      val gate = b.gate("reader",
        Vector(GateInput(fromA.partitionId, 0, 3, a.location),
          GateInput(fromC.partitionId, 0, 3, c.location)), lz4)
      val reader = new TestingGateReader(gate)
      assert(reader.readAll() == expected(Seq(fromA.partitionId, fromC.partitionId), 0, 3))
      assert((0 until gate.numberOfChannels).forall(gate.channel(_).isInstanceOf[RemoteInputChannel]))
      assert(gate.numBuffersInLocal.sum == 0)
      reader.close()
    }
    elsewhere.delete()
  }

  test("releasing a shuffle on the reader leaves the producer's files; a file the producer deleted fails the read " +
    "naming its map output") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B", readHostLocal = true)
    withExecutors(a, b) {
      b.readsFilesOf(a)
      val p = written(a, ResultPartitionID(3, 0))
      val path = p.file.path
      def read(): Map[(Long, Int), Int] = {
        val reader = new TestingGateReader(b.gate("reader", Vector(GateInput(p.partitionId, 0, 3, a.location)), lz4))
        try reader.readAll()
        finally reader.close()
      }
      assert(read() == expected(Seq(p.partitionId), 0, 3))
      assert(b.hostLocal.get.partitionManager.releasePartitionsOfShuffle(3) == 1)
      assert(path.exists() && PartitionedFile.indexPathOf(path).exists(), "the reader deleted the producer's files")
      assert(read() == expected(Seq(p.partitionId), 0, 3), "read again after the release")
      // The producer releases its shuffle: the reader's table row points at nothing any more.
      a.partitionManager.releasePartitionsOfShuffle(3)
      assert(!path.exists())
      val e = intercept[InputChannelException](read())
      assert(e.channel.producer.hostLocal && e.channel.inputs.map(_.partitionId) == Seq(p.partitionId), e.getMessage)
      assert(e.getMessage.contains(p.partitionId.toString) && e.getMessage.contains(path.getName), e.getMessage)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a map output read from one executor's files, then located at another's, is read from the other's") {
    withReaderBesideTwo { (a, b, c) =>
      b.readsFilesOf(a); b.readsFilesOf(c)
      val id = ResultPartitionID(6, 0)
      def read(at: TestingExecutor): Map[(Long, Int), Int] = {
        val reader = new TestingGateReader(b.gate("reader", Vector(GateInput(id, 0, 3, at.location)), lz4))
        try {
          assert(reader.gate.channel(0).producer == at.location.copy(hostLocal = true))
          reader.readAll()
        } finally reader.close()
      }
      written(a, id)
      assert(read(a) == expected(Seq(id), 0, 3))
      // The output moves to C (as decommissioning moves it) and A's copy goes.
      written(c, id)
      a.partitionManager.releasePartitionsOfShuffle(6)
      assert(read(c) == expected(Seq(id), 0, 3))
    }
  }

  test("encrypted partition files (Spark's I/O encryption) are decrypted when read from their files") {
    val key = Array.tabulate[Byte](32)(i => (i * 3 + 2).toByte)
    def cipher = Some(PartitionedFileCipher(key, "AES/CTR/NoPadding"))
    val a = new TestingExecutor("A", fileCipher = cipher)
    val b = new TestingExecutor("B", fileCipher = cipher, readHostLocal = true)
    withExecutors(a, b) {
      b.readsFilesOf(a)
      val p = written(a, ResultPartitionID(4, 0), codec = None)
      val reader = new TestingGateReader(b.gate("reader", Vector(GateInput(p.partitionId, 0, 3, a.location))))
      assert(reader.readAll() == expected(Seq(p.partitionId), 0, 3))
      assert(reader.gate.channel(0).producer.hostLocal)
      reader.close()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }
}
