package io.sluice.netty

import io.sluice.NettyLeakDetection
import io.sluice.netty.TestingExecutor.{async, await, withExecutors}
import io.sluice.partition.consumer.{GateInput, InputChannelException}
import io.sluice.partition.{SortMergeResultPartition, ProducerFailedException, ResultPartitionID}
import org.scalatest.funsuite.AnyFunSuite

/**
 * One reader's failure on the server stays that reader's: two readers share a connection, the
 * partition of one breaks mid-stream, or its file is cut short under its open reader, and the
 * other still receives every buffer over the same connection, which stays open: a frame's stored
 * buffers are read before any of it is sent, so a read that fails fails only its reader.
 */
class PartitionRequestQueueSuite extends AnyFunSuite with NettyLeakDetection {

  private val records = 3000
  private val recordSize = 1000

  private val breakages: Seq[(String, SortMergeResultPartition => TestingExecutor => Unit)] = Seq(
    "its file is deleted" -> (p => a => a.served(p.partitionId).file.delete()),
    "its partition is released" -> (p =>
      a =>
        a.partitionManager.releasePartition(p.partitionId,
          new IllegalStateException("released by the test"))))

  for ((how, break) <- breakages) {
    test(s"a reader whose partition fails mid-stream ($how) fails alone; the other reader on the connection completes") {
      val a = new TestingExecutor("A")
      val b = new TestingExecutor("B")
      withExecutors(a, b) {
        val (good, bad, goodReader, badReader) = twoReaders(a, b)
        assert(goodReader.readOne())
        break(bad)(a)
        val readingGood = async(goodReader.readAll())
        val e = intercept[InputChannelException](await(async { while (badReader.readOne()) (); "ended" }, 60000))
        assert(e.getMessage.contains(bad.partitionId.toString), e.getMessage)
        e.getCause match {
          case r: RemoteTransportException =>
            assert(r.getMessage.contains(bad.partitionId.toString) && r.getMessage.contains(s"127.0.0.1:${a.port}"),
              r.getMessage)
          case f: ProducerFailedException =>
            assert(how.contains("released") && f.getMessage.contains(bad.partitionId.toString), f.getMessage)
          case other => fail(s"unexpected cause of the failure: $other", e)
        }
        assert(badReader.recordsRead.get < records)

        assert(await(readingGood, 60000) == Map((0L, 0) -> records), "the other reader received every record")
        assert(
          a.connectionManager.numServerConnections == 1 && b.connectionManager.numClientConnections == 1 &&
            b.counters.connectionsOpened.sum == 1, "the connection stayed up")
        assert(a.counters.protocolErrors.sum == 0 && b.counters.protocolErrors.sum == 0)
        goodReader.close(); badReader.close()
        waitUntil(a.counters.activeReaders.get == 0, s"${a.counters.activeReaders.get} readers left on the server")
        a.partitionManager.releasePartition(good.partitionId, null)
        a.partitionManager.releasePartition(bad.partitionId, null)
        a.assertNoCreditViolations(); b.assertNoCreditViolations()
        a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
      }
    }
  }

  for (ioMode <- Seq("NIO", "EPOLL")) {
    test(s"a file cut short under its reader fails that reader alone; the other on the connection reads on ($ioMode)") {
      assume(ioMode == "NIO" || io.netty.channel.epoll.Epoll.isAvailable, "no native epoll here")
      val transport = Map("spark.sluice.io.mode" -> ioMode)
      val a = new TestingExecutor("A", transportSettings = transport)
      val b = new TestingExecutor("B", transportSettings = transport)
      withExecutors(a, b) {
        val (good, bad, goodReader, badReader) = twoReaders(a, b)
        val connection = b.clientChannelTo(a)
        // Cut the file its open reader reads from: the read thread finds its end early, before the
        // frame's header went out, so only that reader fails.
        val raf = new java.io.RandomAccessFile(bad.file.path, "rw")
        try raf.setLength(0)
        finally raf.close()
        val e = intercept[InputChannelException](await(async { while (badReader.readOne()) (); "ended" }, 60000))
        assert(e.getMessage.contains(bad.partitionId.toString) && e.getMessage.contains(s"127.0.0.1:${a.port}") &&
            e.getMessage.contains("Could not send"), e.getMessage)
        assert(badReader.recordsRead.get < records)
        assert(await(async(goodReader.readAll()), 60000) == Map((0L, 0) -> records))
        assert(connection.isActive && a.counters.unreadablePayloads.sum == 1, "the connection stayed up")
        goodReader.close(); badReader.close()
        waitUntil(a.counters.activeReaders.get == 0, s"${a.counters.activeReaders.get} readers left on the server")
        a.partitionManager.releasePartition(good.partitionId, null)
        a.partitionManager.releasePartition(bad.partitionId, null)
        a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
      }
    }
  }

  /** Two finished partitions on `a` read from `b` over one connection; 100 records of `bad` read. */
  private def twoReaders(a: TestingExecutor, b: TestingExecutor)
      : (SortMergeResultPartition, SortMergeResultPartition, TestingGateReader, TestingGateReader) = {
    val good = a.blockingPartition(ResultPartitionID(1, 0), 1, None)
    val bad = a.blockingPartition(ResultPartitionID(1, 1), 1, None)
    Seq(good, bad).foreach { p => TestingRecords.writeMany(p, 0, records, recordSize); a.finish(p) }
    val goodReader = new TestingGateReader(b.gate("good", Vector(GateInput(good.partitionId, 0, 1, a.location))))
    val badReader = new TestingGateReader(b.gate("bad", Vector(GateInput(bad.partitionId, 0, 1, a.location))))
    for (_ <- 0 until 100) assert(badReader.readOne())
    (good, bad, goodReader, badReader)
  }

  private def waitUntil(condition: => Boolean, what: => String, timeoutMs: Long = 30000): Unit = {
    val deadline = System.currentTimeMillis() + timeoutMs
    while (!condition && System.currentTimeMillis() < deadline) Thread.sleep(10)
    assert(condition, what)
  }
}
