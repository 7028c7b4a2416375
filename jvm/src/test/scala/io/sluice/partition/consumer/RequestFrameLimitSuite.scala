package io.sluice.partition.consumer

import io.sluice.{NettyLeakDetection, TestingThreads}
import io.sluice.config.{SluiceConf, SluiceOptions}
import io.sluice.netty.{MultiPartitionRequest, TestingExecutor, TestingGateReader, TestingRecords, TransportProtocolException}
import io.sluice.netty.TestingExecutor.{async, await, withExecutors}
import io.sluice.partition.{PartitionedFileCipher, ResultPartitionID, SortMergeResultPartition}
import org.scalatest.funsuite.AnyFunSuite

/**
 * spark.sluice.network.maxFrameLength on the read path: a reducer splits the map outputs it reads
 * from one executor over as many packed channels as its requests need to fit a frame; a request
 * frame over the server's limit fails its own channel only; the largest packed frame a server
 * builds fits the smallest limit the configuration accepts. Producers on A, readers on B; every
 * test ends with every reader released and every buffer back.
 */
class RequestFrameLimitSuite extends AnyFunSuite with NettyLeakDetection {

  /** `n` finished outputs on `e`, one subpartition each holding `records` records of `size` bytes. */
  private def outputs(
      e: TestingExecutor, shuffle: Int, n: Int, records: Int = 1, size: Int = 40): IndexedSeq[SortMergeResultPartition] =
    (0 until n).map { i =>
      val p = e.blockingPartition(ResultPartitionID(shuffle, i), 1, None, poolSize = 1)
      TestingRecords.writeMany(p, 0, records, size)
      e.finish(p)
      p
    }

  private def inputsOf(ps: Seq[SortMergeResultPartition], at: TestingExecutor): IndexedSeq[GateInput] =
    ps.map(p => GateInput(p.partitionId, 0, 1, at.location)).toIndexedSeq

  private def remoteChannels(gate: SingleInputGate): Seq[RemoteInputChannel] =
    (0 until gate.numberOfChannels).map(gate.channel).collect { case r: RemoteInputChannel => r }

  private def finish(a: TestingExecutor, b: TestingExecutor): Unit = {
    TestingThreads.eventually(what = "A's server released every reader")(a.counters.activeReaders.get == 0)
    for (e <- Seq(a, b); id <- e.partitionManager.partitionIds) e.partitionManager.releasePartition(id, null)
    a.assertNoCreditViolations(); b.assertNoCreditViolations()
    a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
  }

  // The default limit, and the smallest one the configuration accepts with 4 KiB segments (a
  // request's frame then holds 678 map outputs).
  for ((what, limitSetting, n) <-
      Seq(("a 64k", None, 3300), ("the smallest accepted", Some(SluiceConf.minMaxFrameLength(4096L)), 1500))) {
    test(s"at $what frame limit a gate reads $n outputs of one executor over split requests; a second gate is untouched") {
      val settings = limitSetting.map(l => SluiceOptions.MaxFrameLength.key -> l.toString).toMap
      val a = new TestingExecutor("A", settings)
      val b = new TestingExecutor("B", settings)
      withExecutors(a, b) {
        val limit = b.conf.get(SluiceOptions.MaxFrameLength)
        assert(limit == limitSetting.getOrElse(64L << 10))
        val wide = outputs(a, 30, n)
        val small = outputs(a, 31, 5, records = 20, size = 300)
        val other = new TestingGateReader(b.gate("second reducer", inputsOf(small, a)))
        assert(other.readOne(), "the second gate reads over the connection first")
        val connection = b.clientChannelTo(a)
        val gate = b.gate("wide reducer", inputsOf(wide, a))
        val channels = remoteChannels(gate)
        val perRequest = MultiPartitionRequest.maxInputs(limit)
        assert(perRequest < n && channels.size == (n + perRequest - 1) / perRequest, s"${channels.size} channels")
        assert(channels.map(_.inputs.size).sum == n && channels.forall(_.inputs.size <= perRequest))
        assert(channels.flatMap(_.inputs.map(_.index)) == (0 until n), "every input once, in order")
        val reader = new TestingGateReader(gate)
        assert(reader.readAll() == wide.map(p => (p.partitionId.producerId, 0) -> 1).toMap, "every record of every output")
        assert((0 until n).forall(gate.hasInputEnded))
        assert(gate.numPartitionRequests == channels.size && gate.peakChannelsInFlight <= gate.maxChannelsInFlight)
        assert(other.readAll().values.sum == 100, "the second gate read every record too")
        assert(a.counters.protocolErrors.sum == 0 && b.counters.protocolErrors.sum == 0, "no frame beyond the limit")
        assert(connection.isActive && (b.clientChannelTo(a) eq connection), "one connection throughout")
        reader.close()
        other.close()
        finish(a, b)
      }
    }
  }

  test("a request frame over the server's limit fails its channel alone, naming the setting; the connection stays") {
    // B's requests may reach 256k: a peer with other settings. A accepts frames of 64k.
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B", settings = Map(SluiceOptions.MaxFrameLength.key -> "256k"))
    withExecutors(a, b) {
      val wide = outputs(a, 32, 4000)
      val small = outputs(a, 33, 3, records = 10, size = 200)
      val other = new TestingGateReader(b.gate("second reducer", inputsOf(small, a)))
      assert(other.readOne())
      val connection = b.clientChannelTo(a)
      val gate = b.gate("wide reducer", inputsOf(wide, a))
      assert(gate.numberOfChannels == 1, "one request of 4000 inputs, 80 KB")
      val reader = new TestingGateReader(gate)
      val e = intercept[InputChannelException](reader.readAll())
      assert(
        e.getCause.getMessage.contains("spark.sluice.network.maxFrameLength") &&
          e.getCause.getMessage.contains("MultiPartitionRequest") && e.getCause.getMessage.contains("65536 bytes"), e.getMessage)
      assert(a.counters.protocolErrors.sum == 0 && b.counters.protocolErrors.sum == 0, "not a connection failure")
      assert(other.readAll().values.sum == 30, "the other gate on the connection reads on")
      assert(connection.isActive && (b.clientChannelTo(a) eq connection))
      reader.close()
      other.close()
      finish(a, b)
    }
  }

  for (encrypted <- Seq(false, true)) {
    val how = if (encrypted) "encrypted" else "plain"
    test(s"a packed frame of 256 entries and a full segment fits the smallest accepted frame limit, $how") {
      val segment = 32L << 10
      val min = SluiceConf.minMaxFrameLength(segment)
      val settings = Map(SluiceOptions.SegmentSize.key -> segment.toString, SluiceOptions.MaxFrameLength.key -> min.toString)
      val cipher = if (encrypted) Some(PartitionedFileCipher(Array.fill[Byte](16)(3), "AES/CTR/NoPadding")) else None
      val a = new TestingExecutor("A", settings, numSegments = 64, fileCipher = cipher)
      val b = new TestingExecutor("B", settings, numSegments = 64, fileCipher = cipher)
      withExecutors(a, b) {
        // One output of 511 subpartitions of one 128-byte stored buffer each, read as one input:
        // 511 data entries and the end, so two frames of 256 entries (the first with exactly a
        // segment of payload: the largest frame there is) or more frames if packing fell short.
        val p = a.blockingPartition(ResultPartitionID(34, 1), 511, None, poolSize = 4)
        for (s <- 0 until 511) TestingRecords.write(p, s, TestingRecords.record(1, s, 0, 124))
        a.finish(p)
        assert((0 until 511).forall(s => p.file.numBuffers(s) == 1 && p.file.buffer(s, 0).storedLength == 128),
          "one stored buffer of 128 bytes per subpartition")
        val gate = b.gate("reducer", Vector(GateInput(p.partitionId, 0, 511, a.location)))
        val reader = new TestingGateReader(gate)
        assert(reader.readAll() == (0 until 511).map(s => (1L, s) -> 1).toMap)
        val ch = remoteChannels(gate).head
        assert(ch.numBuffersReceived == 2, s"${ch.numBuffersReceived} frames: 256 entries each")
        assert(a.counters.protocolErrors.sum == 0 && b.counters.protocolErrors.sum == 0)
        reader.close()
        finish(a, b)
      }
    }
  }
}
