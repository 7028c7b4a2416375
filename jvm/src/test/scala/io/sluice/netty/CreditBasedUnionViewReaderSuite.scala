package io.sluice.netty

import java.util.concurrent.ConcurrentLinkedQueue

import scala.jdk.CollectionConverters._

import io.netty.util.concurrent.FastThreadLocalThread
import io.sluice.{NettyLeakDetection, TestingThreads}
import io.sluice.config.SluiceOptions
import io.sluice.netty.TestingExecutor.{withExecutors, withReaderAndProducer}
import io.sluice.partition.{
  PartitionedFileReader, PartitionNotFoundException, PartitionReadScheduler, ResultPartitionID, SortMergeResultPartition
}
import io.sluice.partition.consumer.{GateInput, InputChannelException, RemoteInputChannel, SingleInputGate}
import org.scalatest.funsuite.AnyFunSuite

/**
 * The server's reader of a packed remote channel: partition files opened and read on the read
 * threads, once per input and reader, never on a Netty event loop; frames within the frame length;
 * a missing input failing the request before a byte is sent; the read threads ending with the
 * server. Producers on A, the reader on B, 4 KiB segments; every test ends with every buffer back.
 */
class CreditBasedUnionViewReaderSuite extends AnyFunSuite with NettyLeakDetection {

  /**
   * One open or read of a partition file: which file (by path: readers read a partition the
   * executor rebuilt over the producer's file), what, on which thread.
   */
  private final case class Io(file: java.io.File, what: String, thread: Thread)

  /** Records every open and read of a partition file in this JVM while `body` runs. */
  private def recordingIo[T](body: ConcurrentLinkedQueue[Io] => T): T = {
    val seen = new ConcurrentLinkedQueue[Io]()
    PartitionedFileReader.ioListener = (f, what) => seen.add(Io(f.path, what, Thread.currentThread()))
    try body(seen)
    finally PartitionedFileReader.ioListener = null
  }

  /** A finished partition on `e` with `records` records of `size` bytes in subpartition 0 of 2. */
  private def output(e: TestingExecutor, id: ResultPartitionID, records: Int, size: Int): SortMergeResultPartition = {
    val p = e.blockingPartition(id, 2, None)
    TestingRecords.writeMany(p, 0, records, size)
    TestingRecords.writeMany(p, 1, 1, 64)
    e.finish(p)
    p
  }

  private def remoteChannel(gate: SingleInputGate): RemoteInputChannel =
    (0 until gate.numberOfChannels).map(gate.channel).collect { case r: RemoteInputChannel => r }.head

  test("with the file cache off each input's file is opened once per reader, and read on read threads only") {
    withReaderAndProducer(Map(SluiceOptions.MaxOpenPartitionFiles.key -> "0")) { (a, b) =>
      // Tiny outputs (many per frame) and outputs of several segments (a file open across frames).
      def records(i: Int): Int = if (i % 7 == 0) 30 else 1 + i % 3
      val outputs = (0 until 40).map(i => output(a, ResultPartitionID(40, i), records(i), 400))
      recordingIo { io =>
        for (round <- 0 until 2) { // a second reader opens every file again, once
          val gate = b.gate(s"reducer $round", outputs.map(p => GateInput(p.partitionId, 0, 1, a.location)))
          val reader = new TestingGateReader(gate)
          assert(reader.readAll() == outputs.indices.map(i => (i.toLong, 0) -> records(i)).toMap)
          assert(remoteChannel(gate).numBuffersReceived < outputs.map(_.file.numBuffers(0)).sum, "small outputs packed")
          reader.close()
        }
        assertOpenedOncePerReaderOffTheLoop(io.asScala.toSeq, outputs, readers = 2, a)
      }
    }
  }

  /** Stored bytes of subpartition 0 of `p`. */
  private def storedBytes(p: SortMergeResultPartition): Long = p.file.subpartitionSizes(0)

  /**
   * Every file of `outputs` opened once per reader, its stored bytes read once per reader in at most
   * one call per stored buffer (fewer where buffers lie back to back), all on read threads.
   */
  private def assertOpenedOncePerReaderOffTheLoop(io: Seq[Io], outputs: Seq[SortMergeResultPartition], readers: Int,
      server: TestingExecutor): Unit = {
    val files = outputs.map(_.file.path).toSet
    val ours = io.filter(e => files.contains(e.file))
    val opens = ours.filter(_.what == "open").groupBy(_.file).map { case (f, es) => f -> es.size }
    assert(opens.keySet == files && opens.values.forall(_ == readers), s"opens per file for $readers readers: $opens")
    val scheduler = server.connectionManager.server.readScheduler
    assert(scheduler.numBytesRead == readers * outputs.map(storedBytes).sum, "each stored byte read once per reader")
    assert(ours.count(_.what == "read") == scheduler.numFileReads)
    assert(scheduler.numFileReads <= readers * outputs.map(_.file.numBuffers(0)).sum, "at most one read per stored buffer")
    val threads = ours.map(_.thread).distinct
    assert(
      threads.forall(t =>
        t.getName.startsWith(PartitionReadScheduler.ThreadPrefix) &&
          !t.isInstanceOf[FastThreadLocalThread]), s"files opened or read on ${threads.map(_.getName).distinct}")
  }

  test("plain PartitionRequests of blocking partitions: files opened once per reader (cache off), read on read threads") {
    withReaderAndProducer(Map(SluiceOptions.MaxOpenPartitionFiles.key -> "0")) { (a, b) =>
      def records(i: Int): Int = if (i % 2 == 0) 30 else 2
      val outputs = (0 until 6).map(i => output(a, ResultPartitionID(45, i), records(i), 400))
      recordingIo { io =>
        for (round <- 0 until 2) {
          val gate = b.gateFactory.create(s"reducer $round", outputs.map(p => GateInput(p.partitionId, 0, 1, a.location)),
            None, waitForProducers = false, pipelined = true)
          val channels = (0 until gate.numberOfChannels).map(gate.channel).collect { case r: RemoteInputChannel => r }
          assert(channels.size == outputs.size && channels.forall(!_.packed), "one PartitionRequest per output")
          val reader = new TestingGateReader(gate)
          assert(reader.readAll() == outputs.indices.map(i => (i.toLong, 0) -> records(i)).toMap)
          reader.close()
        }
        assertOpenedOncePerReaderOffTheLoop(io.asScala.toSeq, outputs, readers = 2, a)
      }
    }
  }

  test("stored buffers that lie back to back in a file are read in one call") {
    withReaderAndProducer() { (a, b) =>
      // Each output: a small buffer in each of its two subpartitions, one after the other in its
      // file; the reducer reads both (a range, as Spark's AQE asks for coalesced partitions).
      val outputs = (0 until 12).map { i =>
        val p = a.blockingPartition(ResultPartitionID(47, i), 2, None)
        TestingRecords.writeMany(p, 0, 2, 100)
        TestingRecords.writeMany(p, 1, 3, 100)
        a.finish(p)
        p
      }
      recordingIo { io =>
        val gate = b.gate("reducer", outputs.map(p => GateInput(p.partitionId, 0, 2, a.location)))
        val reader = new TestingGateReader(gate)
        assert(reader.readAll().values.sum == outputs.size * 5)
        val frames = remoteChannel(gate).numBuffersReceived
        reader.close()
        val scheduler = a.connectionManager.server.readScheduler
        val reads = io.asScala.count(e => e.what == "read" && outputs.exists(_.file.path == e.file))
        assert(outputs.map(_.file.numBuffersTotal).sum == 2 * outputs.size, "two stored buffers per output")
        // One read per output, and one more for each frame that ends between an output's two buffers.
        assert(frames > 1 && reads >= outputs.size && reads <= outputs.size + frames - 1,
          s"$reads reads for ${outputs.size} outputs in $frames frames")
        assert(scheduler.numFileReads == reads)
        assert(scheduler.numBytesRead == outputs.map(_.file.size).sum, "every stored byte read once")
      }
    }
  }

  test("a reader reads ahead up to its credit: several frames per read, and never beyond what it may send") {
    withReaderAndProducer(Map(SluiceOptions.ReadThreads.key -> "1")) { (a, b) =>
      val outputs = (0 until 4).map(i => output(a, ResultPartitionID(46, i), 200, 400))
      recordingIo { io =>
        val gate = b.gate("reducer", outputs.map(p => GateInput(p.partitionId, 0, 1, a.location)))
        val reader = new TestingGateReader(gate)
        assert(reader.readOne()) // the request goes out; the task then reads nothing more
        val ch = remoteChannel(gate)
        def reads = io.asScala.count(_.what == "read")
        TestingThreads.eventually(what = "the server read what the credit allows")(reads > 1 && ch.numQueuedBuffers > 1)
        var last = -1
        while (last != reads) { last = reads; Thread.sleep(300) } // settled: credit spent
        // 4 KiB segments hold one stored buffer a frame: reads are bounded by the credit announced.
        assert(reads <= ch.numCreditsAnnounced, s"$reads stored buffers read for ${ch.numCreditsAnnounced} credits")
        assert(reads > 1, "more than one frame read ahead")
        val submitted = a.connectionManager.server.readScheduler.numSubmitted
        assert(submitted < reads, s"$reads stored buffers in $submitted reads: some read took several frames")
        assert(reader.readAll().values.sum == outputs.size * 200)
        reader.close()
      }
    }
  }

  test("the read threads end when the server shuts down") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    val threads = withExecutors(b) {
      try {
        val p = output(a, ResultPartitionID(41, 0), 20, 500)
        recordingIo { io =>
          val gate = b.gate("reducer",
            IndexedSeq(GateInput(p.partitionId, 0, 1, a.location),
              GateInput(output(a, ResultPartitionID(41, 1), 3, 100).partitionId, 0, 1, a.location)))
          val reader = new TestingGateReader(gate)
          assert(reader.readAll().values.sum == 23)
          reader.close()
          io.asScala.map(_.thread).toSeq.distinct
        }
      } catch { case e: Throwable => a.shutdown(); throw e }
    }
    assert(threads.nonEmpty && threads.forall(_.getName.startsWith(s"${PartitionReadScheduler.ThreadPrefix}${a.port}-")))
    a.shutdown()
    threads.foreach(_.join(TestingThreads.Generous))
    assert(threads.forall(!_.isAlive), "every read thread ended with the server")
    assert(
      !Thread.getAllStackTraces.keySet.asScala.exists(_.getName.startsWith(s"${PartitionReadScheduler.ThreadPrefix}${a.port}-")))
  }

  test("frames stay within the smallest accepted maxFrameLength: 200 tiny outputs, at most 256 entries a frame") {
    // The smallest accepted frame length holds a full 4 KiB receiver buffer under 256 entries, so
    // the entry limit closes these frames; the server's frame budget (which also stops a frame
    // before it would pass maxFrameLength) never has to.
    val min = io.sluice.config.SluiceConf.minMaxFrameLength(4096)
    withReaderAndProducer(Map(SluiceOptions.MaxFrameLength.key -> s"${min}b")) { (a, b) =>
      val outputs = (0 until 200).map(i => output(a, ResultPartitionID(42, i), 1, 16))
      val gate = b.gate("reducer", outputs.map(p => GateInput(p.partitionId, 0, 1, a.location)))
      val reader = new TestingGateReader(gate)
      assert(reader.readAll() == outputs.indices.map(i => (i.toLong, 0) -> 1).toMap)
      val frames = remoteChannel(gate).numBuffersReceived
      // Each output is a stored buffer and an end: 400 entries, at most 256 a frame.
      assert(frames >= 2 && frames <= 8, s"$frames frames for 400 entries")
      assert(a.counters.protocolErrors.sum == 0 && b.counters.protocolErrors.sum == 0)
      reader.close()
    }
  }

  test("a missing input fails the whole request before any byte is sent or any file opened") {
    withReaderAndProducer() { (a, b) =>
      val present = (0 until 30).map(i => output(a, ResultPartitionID(43, i), 2, 100))
      val missing = ResultPartitionID(43, 999)
      val inputs = present.map(p => GateInput(p.partitionId, 0, 1, a.location)).patch(15,
        Seq(GateInput(missing, 0, 1,
            a.location)), 0)
      recordingIo { io =>
        val gate = b.gate("reducer", inputs)
        val reader = new TestingGateReader(gate)
        val e = intercept[InputChannelException](reader.readAll())
        assert(e.getCause.isInstanceOf[PartitionNotFoundException], e.toString)
        assert(remoteChannel(gate).numBuffersReceived == 0 && reader.recordsRead.get == 0, "nothing was sent")
        assert(!io.asScala.exists(e => present.exists(_.file.path == e.file)), "no file was opened or read")
        reader.close()
      }
    }
  }

  test("a reader cancelled while its frames are read gives every pooled frame back") {
    withReaderAndProducer(Map(SluiceOptions.ReadThreads.key -> "1")) { (a, b) =>
      val outputs = (0 until 20).map(i => output(a, ResultPartitionID(44, i), 60, 300))
      for (round <- 0 until 5) {
        val gate = b.gate(s"reducer $round", outputs.map(p => GateInput(p.partitionId, 0, 1, a.location)))
        val reader = new TestingGateReader(gate)
        for (_ <- 0 until 10 * round + 1) assert(reader.readOne())
        reader.close()
      }
    }
  }
}
