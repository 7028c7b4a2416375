package io.sluice.netty

import java.nio.file.FileSystemException
import java.util.concurrent.atomic.AtomicInteger

import io.sluice.NettyLeakDetection
import io.sluice.config.SluiceOptions
import io.sluice.netty.TestingExecutor.withReaderAndProducer
import io.sluice.partition.{
  PartitionedFile, PartitionedFileReader, PartitionNotFoundException, PartitionReadScheduler, ProducerFailedException,
  ResultPartitionID, SortMergeResultPartition
}
import io.sluice.partition.consumer.{GateInput, InputChannelException}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Which failures of a server blame its producer: a server that runs out of memory or of file
 * descriptors, fails for a bug of its own, or refuses a request fails the reading task as itself
 * (Spark retries it) and its data is served to the next attempt; lost or unreadable data is a
 * fetch failure naming the input it concerns. Producers on A, the reader on B, 4 KiB segments.
 */
class ServerFailureSuite extends AnyFunSuite with NettyLeakDetection {

  /** A finished partition on `e` with `records` records of `size` bytes in subpartition 0 of 2. */
  private def output(e: TestingExecutor, id: ResultPartitionID, records: Int, size: Int): SortMergeResultPartition = {
    val p = e.blockingPartition(id, 2, None)
    TestingRecords.writeMany(p, 0, records, size)
    e.finish(p)
    p
  }

  /** Runs `body` while `fault` is called before each open and read of a partition file by a server's read thread. */
  private def injecting[T](fault: (PartitionedFile, String) => Unit)(body: => T): T = {
    PartitionedFileReader.ioListener = (f, what) =>
      if (Thread.currentThread().getName.startsWith(PartitionReadScheduler.ThreadPrefix)) fault(f, what)
    try body
    finally PartitionedFileReader.ioListener = null
  }

  private def inputs(outputs: Seq[SortMergeResultPartition], server: TestingExecutor): IndexedSeq[GateInput] =
    outputs.map(p => GateInput(p.partitionId, 0, 1, server.location)).toIndexedSeq

  private def expected(outputs: Seq[SortMergeResultPartition], records: Int): Map[(Long, Int), Int] =
    outputs.map(p => (p.partitionId.producerId, 0) -> records).toMap

  for {
    (what, io, fault) <- Seq[(String, String, PartitionedFile => Throwable)](
      ("an OutOfMemoryError while reading", "read", _ => new OutOfMemoryError("Direct buffer memory (injected)")),
      ("no file descriptor left to open a file (EMFILE)", "open",
        f => new FileSystemException(f.path.toString, null, s"${ResourceExhaustion.TooManyOpenFiles} (injected)")),
      ("a bug of the server", "read", _ => new IllegalStateException("a bug (injected)")))
  } test(s"$what on the server fails the reading task as itself, not as a fetch failure; a retry reads everything") {
    withReaderAndProducer() { (a, b) =>
      val outputs = (0 until 6).map(i => output(a, ResultPartitionID(60, i), 20, 300))
      val victim = outputs(3).file.path // readers read a partition rebuilt over this file
      val injected = new AtomicInteger
      injecting((f, how) => if (f.path == victim && how == io && injected.getAndIncrement() == 0) throw fault(f)) {
        val reader = new TestingGateReader(b.gate("reducer", inputs(outputs, a)))
        val e = intercept[ServerFailureException](reader.readAll())
        reader.close()
        assert(e.kind == ErrorKind.ServerError, e)
        assert(e.getMessage.contains(s"127.0.0.1:${a.port}") && e.getMessage.contains("(injected)") &&
            e.getMessage.contains("not lost"), e.getMessage)
        assert(injected.get == 1)
        // The producer is fine: the task's next attempt reads every output from it, exactly.
        val retry = new TestingGateReader(b.gate("reducer, attempt 2", inputs(outputs, a)))
        assert(retry.readAll() == expected(outputs, 20))
        retry.close()
      }
    }
  }

  test("a file that cannot be read is a fetch failure naming the input it holds") {
    withReaderAndProducer() { (a, b) =>
      val outputs = (0 until 6).map(i => output(a, ResultPartitionID(61, i), 20, 300))
      val victim = outputs(4).file.path
      injecting((f, how) => if (f.path == victim && how == "read") throw new java.io.IOException("bad sector (injected)")) {
        val gate = b.gate("reducer", inputs(outputs, a))
        val reader = new TestingGateReader(gate)
        val e = intercept[InputChannelException](reader.readAll())
        assert(e.getMessage.contains("bad sector (injected)"), e.getMessage)
        reader.close()
      }
    }
  }

  test("a request beyond the peer's reader limit fails its task as a refusal, not as a fetch failure") {
    withReaderAndProducer(Map(SluiceOptions.MaxReadersPerPeer.key -> "1")) { (a, b) =>
      val outputs = (0 until 3).map(i => output(a, ResultPartitionID(62, i), 400, 300))
      val first = new TestingGateReader(b.gate("reducer 1", inputs(outputs, a)))
      assert(first.readOne(), "the first reader holds the peer's only reader")
      val second = new TestingGateReader(b.gate("reducer 2", inputs(outputs, a)))
      val e = intercept[ServerFailureException](second.readAll())
      assert(e.kind == ErrorKind.Refused && e.getMessage.contains(s"${SluiceOptions.MaxReadersPerPeer.key}=1"),
        e.getMessage)
      second.close()
      assert(first.readAll() == expected(outputs, 400), "the first reader goes on")
      first.close()
      val again = new TestingGateReader(b.gate("reducer 2, attempt 2", inputs(outputs, a)))
      assert(again.readAll() == expected(outputs, 400), "once the first is done, the retry is served")
      again.close()
    }
  }

  for (when <- Seq("before the request", "while the reader reads earlier inputs")) {
    test(s"a producer failed $when is a fetch failure blaming its input, not the first one not read yet") {
      withReaderAndProducer() { (a, b) =>
        // Three frames per output: the server cannot read far ahead of a paused reader.
        val outputs = (0 until 10).map(i => output(a, ResultPartitionID(63, i), 40, 300))
        // Released as a lost executor's outputs are: gone before the request, or failed under its reader.
        def fail(): Unit = a.partitionManager.releasePartition(outputs(7).partitionId, new RuntimeException("lost (test)"))
        if (when == "before the request") fail()
        val gate = b.gate("reducer", inputs(outputs, a))
        val reader = new TestingGateReader(gate)
        if (when != "before the request") { assert(reader.readOne()); fail() }
        val e = intercept[InputChannelException](reader.readAll())
        val lost = e.getCause match {
          case _: PartitionNotFoundException => true
          case _: ProducerFailedException => true // its reader released it: "released"
          case _ => false
        }
        assert(lost, e.getMessage)
        assert(gate.inputToBlame(e) == 7, s"blamed input ${gate.inputToBlame(e)}: ${e.getMessage}")
        reader.close()
      }
    }
  }
}
