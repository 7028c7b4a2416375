package io.sluice.partition.consumer

import java.io.RandomAccessFile
import java.nio.charset.StandardCharsets
import java.nio.file.Files

import io.sluice.NettyLeakDetection
import io.sluice.buffer.BlockCodec
import io.sluice.config.SluiceOptions
import io.sluice.metrics.{SystemClock, TaskIOMetricGroup, TaskKey}
import io.sluice.netty.{TestingExecutor, TestingGateReader, TestingRecords}
import io.sluice.netty.TestingExecutor.{async, await, withExecutors}
import io.sluice.partition.{PartitionedFileCipher, ResultPartitionID, SortMergeResultPartition}
import org.scalatest.funsuite.AnyFunSuite

/** Gates as the Spark layer builds them: local and remote channels, pipelined and blocking inputs. */
class InputGateFactorySuite extends AnyFunSuite with NettyLeakDetection {

  private def lz4 = Some(BlockCodec.forSparkCodec("lz4", 1))

  test("a gate reads local and remote pipelined inputs side by side") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      val remote = a.pipelinedPartition(ResultPartitionID(1, 0), 1)
      val local = b.pipelinedPartition(ResultPartitionID(1, 1), 1)
      val gate =
        b.gate("mixed", Vector(GateInput(remote.partitionId, 0, 1, a.location), GateInput(local.partitionId, 0, 1, b.location)))
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
        a.finish(p)
        assert(p.numSpills > 1)
        p
      }
      val localToo = b.blockingPartition(ResultPartitionID(2, 9), 3, lz4)
      TestingRecords.writeMany(localToo, 1, 300, 200)
      b.finish(localToo)
      for (round <- 1 to 2) {
        val inputs =
          parts.map(p => GateInput(p.partitionId, 1, 3, a.location)) :+ GateInput(localToo.partitionId, 1, 2, b.location)
        val reader = new TestingGateReader(b.gate(s"round $round", inputs, lz4))
        assert(reader.readAll() == Map((0L, 1) -> 400, (0L, 2) -> 400, (1L, 1) -> 400, (1L, 2) -> 400, (9L, 1) -> 300))
        reader.close()
      }
      parts.foreach(p => a.partitionManager.releasePartition(p.partitionId, null))
      b.partitionManager.releasePartition(localToo.partitionId, null)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("numBytesIn counts the bytes the producers wrote (numBytesOut); numBytesInLocal / numBytesInRemote the " +
    "bytes as sent (compressed), which are the stored bytes Spark reports") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      val remote = a.blockingPartition(ResultPartitionID(4, 0), 2, lz4)
      val local = b.blockingPartition(ResultPartitionID(4, 1), 2, lz4)
      for (p <- Seq(remote, local); s <- 0 until 2) TestingRecords.writeMany(p, s, 300, 500 + 100 * s)
      a.finish(remote); b.finish(local)
      val gate = b.gate("reader",
        Vector(GateInput(remote.partitionId, 0, 2, a.location),
          GateInput(local.partitionId, 0, 2, b.location)), lz4)
      val group = new TaskIOMetricGroup(TaskKey(5, 0, 0, 77L), SystemClock)
      group.attachInputGate(gate)
      val reader = new TestingGateReader(gate)
      assert(reader.readAll() == Map((0L, 0) -> 300, (0L, 1) -> 300, (1L, 0) -> 300, (1L, 1) -> 300))
      val s = group.finish()
      val written = remote.numBytesOut.sum + local.numBytesOut.sum
      assert(written == 4 * 300 * 4 + 2 * 300 * (500 + 600)) // records and their 4-byte headers
      // Flink's numBytesIn: the buffers the task consumed, decompressed, i.e. what the producers emitted.
      assert(s.numBytesIn == written)
      // Flink's channel counters count buffers as they arrive: compressed, the partition files' stored bytes.
      assert(s.numBytesInRemote == remote.subpartitionSizes.sum && s.numBytesInLocal == local.subpartitionSizes.sum)
      assert(s.numBytesInRemote > 0 && s.numBytesInLocal > 0)
      assert(s.numBytesInLocal + s.numBytesInRemote < written / 4, s"$s: the records compress well")
      reader.close()
      a.partitionManager.releasePartition(remote.partitionId, null)
      b.partitionManager.releasePartition(local.partitionId, null)
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
        a.finish(p)
        val raf = new RandomAccessFile(p.file.path, "rw")
        try { raf.seek(raf.length() / 2); val x = raf.read(); raf.seek(raf.length() / 2); raf.write(x ^ 0x5a) }
        finally raf.close()
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

  // ---- Spark's I/O encryption (spark.io.encryption.enabled) --------------------------------------

  private val ioKey = Array.tabulate[Byte](32)(i => (i * 5 + 1).toByte)
  private def fileCipher = Some(PartitionedFileCipher(ioKey, "AES/CTR/NoPadding"))
  private val Marker = "SLUICE-SECRET-MARKER".getBytes(StandardCharsets.US_ASCII)

  /** Record `seq`: the marker, the sequence number, filler. */
  private def marked(seq: Int): Array[Byte] =
    Marker ++ java.nio.ByteBuffer.allocate(4).putInt(seq).array() ++ Array.fill[Byte](50 + seq % 400)((seq % 7).toByte)

  /** A finished partition on `e` of 2 subpartitions holding marked records 0 until n, even ones in subpartition 0. */
  private def markedPartition(
      e: TestingExecutor, id: ResultPartitionID, n: Int, codec: Option[BlockCodec]): SortMergeResultPartition = {
    val p = e.blockingPartition(id, 2, codec)
    (0 until n).foreach(i => TestingRecords.write(p, i % 2, marked(i)))
    e.finish(p)
    assert(p.numSpills > 1, "several regions")
    p
  }

  /** Every record `gate` delivers, in order. */
  private def readRecords(gate: SingleInputGate): Seq[Seq[Byte]] = {
    val reader = new TestingGateReader(gate)
    try Iterator.continually(reader.next()).takeWhile(_ != null).map(_.toSeq).toSeq
    finally reader.close()
  }

  for (encrypted <- Seq(true, false)) {
    test(s"blocking partitions ${if (encrypted) "encrypted with the application's I/O key hold no trace of the marker"
      else "without I/O encryption hold the marker"}; remote (FileRegion) and local readers get the exact records") {
      val c = if (encrypted) fileCipher else None
      val a = new TestingExecutor("A", fileCipher = c)
      val b = new TestingExecutor("B", fileCipher = c)
      withExecutors(a, b) {
        for ((codec, i) <- Seq(None, lz4).zipWithIndex) {
          val p = markedPartition(a, ResultPartitionID(20, i), 1500, codec)
          val onDisk = Files.readAllBytes(p.file.path.toPath)
          val found = onDisk.indexOfSlice(Marker.toSeq) >= 0
          if (encrypted) assert(!found, s"the marker is in the encrypted file (codec $codec)")
          else if (codec.isEmpty) assert(found, "the marker is in the plain file")
          val expected = (0 until 1500 by 2).map(marked(_).toSeq) ++ (1 until 1500 by 2).map(marked(_).toSeq)
          for (reader <- Seq(b, a)) {
            val gate = reader.gate(s"reader in ${reader.executorId}", Vector(GateInput(p.partitionId, 0, 2, a.location)), codec)
            assert(gate.channel(0).isRemote == (reader eq b))
            assert(readRecords(gate) == expected, s"records read in ${reader.executorId} (codec $codec)")
            if (reader eq a) assert(gate.numBuffersInLocal.sum == p.file.numBuffersTotal, "every stored buffer, locally")
            else {
              val frames = gate.numBuffersInRemote.sum
              assert(frames > 0 && frames <= p.file.numBuffersTotal,
                s"$frames frames carry ${p.file.numBuffersTotal} stored buffers")
            }
          }
          a.partitionManager.releasePartition(p.partitionId, null)
        }
        a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
      }
    }
  }

  test("an encrypted partition with a flipped byte fails its remote and local readers with a checksum mismatch") {
    val a = new TestingExecutor("A", fileCipher = fileCipher)
    val b = new TestingExecutor("B", fileCipher = fileCipher)
    withExecutors(a, b) {
      val p = markedPartition(a, ResultPartitionID(21, 0), 600, None)
      val raf = new RandomAccessFile(p.file.path, "rw")
      try { raf.seek(raf.length() / 2); val x = raf.read(); raf.seek(raf.length() / 2); raf.write(x ^ 0x01) }
      finally raf.close()
      for (reader <- Seq(b, a)) {
        val r = new TestingGateReader(reader.gate("victim", Vector(GateInput(p.partitionId, 0, 2, a.location))))
        val e = intercept[InputChannelException](while (r.next() != null) ())
        assert(e.getCause.isInstanceOf[CorruptBufferException], e)
        assert(e.getMessage.contains("Checksum mismatch") && e.getMessage.contains("after decryption") &&
            e.getMessage.contains("executor A"), e.getMessage)
        r.close()
      }
      a.partitionManager.releasePartition(p.partitionId, null)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a reader with another key or none fails clearly instead of reading garbage") {
    val a = new TestingExecutor("A", fileCipher = fileCipher)
    val none = new TestingExecutor("B")
    val other = new TestingExecutor("C", fileCipher = Some(PartitionedFileCipher(ioKey.reverse, "AES/CTR/NoPadding")))
    withExecutors(a, none, other) {
      val p = markedPartition(a, ResultPartitionID(22, 0), 300, None)
      for ((reader, expected) <- Seq(none -> "no I/O encryption key", other -> "Checksum mismatch")) {
        val r = new TestingGateReader(reader.gate("wrong key", Vector(GateInput(p.partitionId, 0, 2, a.location))))
        val e = intercept[InputChannelException](while (r.next() != null) ())
        assert(e.getCause.isInstanceOf[CorruptBufferException] && e.getMessage.contains(expected), e.getMessage)
        r.close()
        reader.awaitAllBuffersBack()
      }
      a.partitionManager.releasePartition(p.partitionId, null)
      a.awaitAllBuffersBack()
    }
  }

  test("gate pools: credit-based gates float up to maxCreditWindow - buffersPerChannel, starting each window at " +
    "floatingBuffersPerGate; credit-less ones share floatingBuffersPerGate + the channels in flight's exclusive buffers") {
    for (creditBased <- Seq(true, false)) {
      val a = new TestingExecutor("A")
      val b = new TestingExecutor("B",
        Map(SluiceOptions.CreditBased.key -> creditBased.toString,
          SluiceOptions.BuffersPerChannel.key -> "3", SluiceOptions.FloatingBuffersPerGate.key -> "5",
          SluiceOptions.MaxCreditWindow.key -> "20", SluiceOptions.MaxChannelsInFlightPerGate.key -> "2"))
      withExecutors(a, b) {
        val p = a.pipelinedPartition(ResultPartitionID(4, 0), 4)
        for (s <- 0 until 4) TestingRecords.writeMany(p, s, 10, 100)
        p.finish()
        val gate = b.gate("sized", (0 until 4).map(s => GateInput(p.partitionId, s, s + 1, a.location)))
        val expectedMax = if (creditBased) 20 - 3 else 5 + 3 * 2
        assert(gate.floatingBuffers.maxNumberOfSegments == expectedMax)
        assert(gate.initialFloatingCredit == 5)
        assert(b.networkBufferPool.numberOfRequiredSegments == gate.floatingBuffers.numberOfRequiredSegments,
          "an unread gate holds no exclusive buffers")
        gate.requestPartitions()
        assert(gate.numChannelsRequested == 2)
        val exclusive = b.networkBufferPool.numberOfRequiredSegments - gate.floatingBuffers.numberOfRequiredSegments
        assert(exclusive == (if (creditBased) 6 else 0), "exclusive buffers are only taken with credit, for the window")
        val reader = new TestingGateReader(gate)
        assert(reader.readAll() == (0 until 4).map(s => (0L, s) -> 10).toMap)
        assert(gate.peakChannelsInFlight == 2)
        reader.close()
        a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
      }
    }
  }

  test("a regular gate's remote channels keep credit windows of at least their share of the gate's pool, never " +
    "less than Flink's") {
    val conf = Map(SluiceOptions.BuffersPerChannel.key -> "3", SluiceOptions.FloatingBuffersPerGate.key -> "5",
      SluiceOptions.MaxCreditWindow.key -> "20")
    val a = new TestingExecutor("A")
    val c = new TestingExecutor("C")
    val b = new TestingExecutor("B", conf)
    withExecutors(a, b, c) {
      val fromA = a.blockingPartition(ResultPartitionID(16, 0), 2, None)
      val fromC = c.blockingPartition(ResultPartitionID(16, 1), 2, None)
      Seq(fromA -> a, fromC -> c).foreach { case (p, e) => TestingRecords.writeMany(p, 1, 300, 100); e.finish(p) }
      val one = b.gate("one executor", IndexedSeq(GateInput(fromA.partitionId, 1, 2, a.location)))
      val two = b.gate("two executors",
        IndexedSeq(GateInput(fromA.partitionId, 1, 2, a.location), GateInput(fromC.partitionId, 1, 2, c.location)))
      assert(one.floatingBuffers.maxNumberOfSegments == 17 && two.floatingBuffers.maxNumberOfSegments == 17)
      assert(one.initialFloatingCredit == 17, "one channel: the whole pool")
      assert(two.initialFloatingCredit == 8, "two channels: half each")
      // (A pipelined gate starts at Flink's window: "gate pools" above.)
      for (g <- Seq(one, two)) {
        val reader = new TestingGateReader(g)
        val expected = if (g eq two) Map((0L, 1) -> 300, (1L, 1) -> 300) else Map((0L, 1) -> 300)
        assert(reader.readAll() == expected, g.owner)
        reader.close()
      }
      Seq(fromA -> a, fromC -> c).foreach { case (p, e) => e.partitionManager.releasePartition(p.partitionId, null) }
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack(); c.awaitAllBuffersBack()
    }
  }

  test("4 gates x 300 remote channels each, read concurrently over 96 segments: every record, every buffer back") {
    val a = new TestingExecutor("A", numSegments = 1024)
    val b = new TestingExecutor("B", numSegments = 96)
    withExecutors(a, b) {
      def count(producer: Int): Int = 3 + producer % 5
      val parts = (0 until 300).map { i =>
        val p = a.blockingPartition(ResultPartitionID(11, i), 4, None, poolSize = 2)
        for (s <- 0 until 4) TestingRecords.writeMany(p, s, count(i), 100 + (i % 4) * 500)
        a.finish(p)
        p
      }
      val gates = (0 until 4).map(s => b.gate(s"reducer $s", parts.map(p => GateInput(p.partitionId, s, s + 1, a.location))))
      assert(b.networkBufferPool.numberOfRequiredSegments == 4, "four unread gates hold their floating minimums only")
      val readers = gates.map(new TestingGateReader(_))
      val reading = readers.map(r => async(r.readAll()))
      reading.zipWithIndex.foreach { case (r, s) =>
        assert(await(r, 180000) == parts.indices.map(i => (i.toLong, s) -> count(i)).toMap, s"reducer $s")
      }
      gates.foreach { g =>
        assert(g.numberOfInputs == 300 && g.numChannelsRequested == 1 && g.numChannelsInFlight == 0,
          s"$g: one channel for the 300 map outputs of one executor")
        assert(g.peakChannelsInFlight * 2 + 4 <= 96, s"$g: its exclusive buffers fit the executor's memory")
        assert(g.numExclusiveSegmentsHeld == 0, "a gate with nothing left to request keeps no exclusive buffer")
      }
      readers.foreach(_.close())
      parts.foreach(p => a.partitionManager.releasePartition(p.partitionId, null))
      a.assertNoCreditViolations(); b.assertNoCreditViolations()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a regular gate never has more than maxChannelsInFlightPerGate channels in flight, local ones included") {
    val producers = (0 until 5).map(i => new TestingExecutor(s"A$i"))
    val b = new TestingExecutor("B", Map(SluiceOptions.MaxChannelsInFlightPerGate.key -> "2"))
    withExecutors(producers :+ b: _*) {
      val remote = for ((a, e) <- producers.zipWithIndex; i <- 0 until 8) yield {
        val p = a.blockingPartition(ResultPartitionID(12, e * 100L + i), 1, None)
        TestingRecords.writeMany(p, 0, 20, 300)
        a.finish(p)
        (a, p)
      }
      val local = (0 until 3).map { i =>
        val p = b.blockingPartition(ResultPartitionID(12, 1000L + i), 1, None)
        TestingRecords.writeMany(p, 0, 20, 300)
        b.finish(p)
        (b, p)
      }
      val inputs = (remote ++ local).map { case (e, p) => GateInput(p.partitionId, 0, 1, e.location) }
      val gate = b.gate("windowed", inputs.toIndexedSeq)
      assert(gate.maxChannelsInFlight == 2)
      assert(gate.numberOfChannels == 6 && gate.numberOfInputs == 43, s"$gate: one channel per producing executor")
      val reader = new TestingGateReader(gate)
      var records = 0
      while (reader.readOne()) {
        records += 1
        assert(gate.numChannelsInFlight <= 2, s"$gate")
        assert(gate.numExclusiveSegmentsHeld <= 2 * 2, s"$gate holds more exclusive buffers than its window needs")
      }
      assert(records == 43 * 20)
      assert(gate.peakChannelsInFlight == 2 && gate.numChannelsRequested == 6)
      reader.close()
      (remote ++ local).foreach { case (e, p) => e.partitionManager.releasePartition(p.partitionId, null) }
      (producers :+ b).foreach(_.awaitAllBuffersBack())
    }
  }

  test("lazy: a gate sends no partition request, opens no connection and takes no exclusive buffer before it is read") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      val p = a.blockingPartition(ResultPartitionID(13, 0), 2, None)
      for (s <- 0 until 2) TestingRecords.writeMany(p, s, 50, 200)
      a.finish(p)
      val gate = b.gate("lazy", (0 until 2).map(s => GateInput(p.partitionId, s, s + 1, a.location)))
      assert(gate.numChannelsRequested == 0)
      assert(b.connectionManager.numClientConnections == 0 && a.counters.activeReaders.get == 0)
      assert(b.networkBufferPool.numberOfRequiredSegments == gate.floatingBuffers.numberOfRequiredSegments)
      val reader = new TestingGateReader(gate)
      assert(reader.readOne())
      assert(gate.numChannelsRequested == 1 && b.connectionManager.numClientConnections == 1,
        "one channel reads both subpartition ranges of the executor")
      assert(reader.readAll() == Map((0L, 0) -> 50, (0L, 1) -> 50))
      reader.close()
      a.partitionManager.releasePartition(p.partitionId, null)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("credit-less: the unread input of a sort-merge join requests nothing, so it cannot stall the connection") {
    val settings = Map(SluiceOptions.CreditBased.key -> "false", SluiceOptions.RequestTimeout.key -> "5s")
    val a = new TestingExecutor("A", settings)
    val b = new TestingExecutor("B", settings)
    withExecutors(a, b) {
      val (left, right) =
        (a.blockingPartition(ResultPartitionID(14, 0), 1, None), a.blockingPartition(ResultPartitionID(14, 1), 1, None))
      // Far more data than the unread gate's pool holds: requested, it would fill the pool and stall the connection.
      Seq(left, right).foreach { p => TestingRecords.writeMany(p, 0, 400, 1000); a.finish(p) }
      val unread = new TestingGateReader(b.gate("join right side", Vector(GateInput(right.partitionId, 0, 1, a.location))))
      val read = new TestingGateReader(b.gate("join left side", Vector(GateInput(left.partitionId, 0, 1, a.location))))
      // Had the unread gate requested its partition, its data would fill its pool and stall the
      // shared connection until it is read: this read would get nothing and fail after requestTimeout.
      assert(read.readAll() == Map((0L, 0) -> 400))
      assert(unread.gate.numChannelsRequested == 0)
      assert(unread.readAll() == Map((1L, 0) -> 400))
      Seq(read, unread).foreach(_.close())
      Seq(left, right).foreach(p => a.partitionManager.releasePartition(p.partitionId, null))
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a gate whose executor's memory is taken waits for it, then reads everything") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B", numSegments = 12)
    withExecutors(a, b) {
      val p = a.blockingPartition(ResultPartitionID(15, 0), 3, None)
      for (s <- 0 until 3) TestingRecords.writeMany(p, s, 100, 500)
      a.finish(p)
      val other = b.networkBufferPool.createBufferPool(11, 11, "another task's partition")
      val gate = b.gate("patient", (0 until 3).map(s => GateInput(p.partitionId, s, s + 1, a.location)))
      val reader = new TestingGateReader(gate)
      val reading = async(reader.readAll())
      io.sluice.TestingThreads.eventually(what = "the gate to wait for memory")(gate.idleTimeNanosNow > 0)
      assert(!reading.isDone && gate.numChannelsRequested == 0)
      other.lazyDestroy()
      assert(await(reading) == (0 until 3).map(s => (0L, s) -> 100).toMap)
      reader.close()
      a.partitionManager.releasePartition(p.partitionId, null)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }
}
