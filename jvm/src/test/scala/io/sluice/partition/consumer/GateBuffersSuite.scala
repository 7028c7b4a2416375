package io.sluice.partition.consumer

import io.sluice.NettyLeakDetection
import io.sluice.buffer.BlockCodec
import io.sluice.config.{SluiceConf, SluiceOptions}
import io.sluice.netty.{TestingExecutor, TestingGateReader, TestingRecords}
import io.sluice.netty.TestingExecutor.{async, await, withExecutors}
import io.sluice.partition.{ResultPartitionID, SortMergeResultPartition}
import org.scalatest.funsuite.AnyFunSuite

/**
 * A regular gate's network memory against the number of executors it reads from: bounded by a
 * constant (exclusive buffers up to maxRequiredBuffersPerGate, then floating buffers only, as
 * Flink past FLINK-30473's threshold), with credit reaching every channel when channels outnumber
 * buffers. Every executor here is a [[TestingExecutor]]: its own pools and Netty server on loopback.
 */
class GateBuffersSuite extends AnyFunSuite with NettyLeakDetection {
  import GateBuffersSuite.Peak

  /** Few threads per executor, so hundreds fit one JVM. */
  private val Small = Map("spark.sluice.io.serverThreads" -> "1", "spark.sluice.io.clientThreads" -> "1")
  private val Lean = Map(SluiceOptions.ReadThreads.key -> "1")

  /** Reads `gate` to its end, sampling what it holds; returns the records per producer and the peaks. */
  private def readSampling(gate: SingleInputGate): (Map[(Long, Int), Int], Peak) = {
    val reader = new TestingGateReader(gate)
    var held = 0; var exclusive = 0; var inFlight = 0
    while (reader.readOne()) {
      held = math.max(held, gate.numNetworkSegmentsHeld)
      exclusive = math.max(exclusive, gate.numExclusiveSegmentsHeld)
      inFlight = math.max(inFlight, gate.numChannelsInFlight)
    }
    val read = reader.readAll()
    reader.close()
    (read, Peak(held, exclusive, inFlight))
  }

  /**
   * `executors` executors: the reader B and `executors - 1` producers, each with one map output
   * of `reducers` reduce partitions; B's `reducers` gates read at once, each one reduce partition
   * of every producer. Returns each gate's peak and B's peak required segments.
   */
  private def shuffle(executors: Int, reducers: Int, readerSegments: Int): (Seq[Peak], Int) = {
    val producers = (1 until executors).map(i => new TestingExecutor(s"P$i", Lean, Small, numSegments = 16))
    val b = new TestingExecutor("B", Lean, Small, numSegments = readerSegments)
    withExecutors(producers :+ b: _*) {
      val parts: Seq[(TestingExecutor, SortMergeResultPartition)] = producers.zipWithIndex.map { case (p, i) =>
        val part = p.blockingPartition(ResultPartitionID(41, i), reducers, None, poolSize = 2)
        for (r <- 0 until reducers) TestingRecords.writeMany(part, r, 6, 1500) // ~9 KB: three 4 KiB buffers
        p.finish(part)
        (p, part)
      }
      val gates = (0 until reducers).map(r =>
        b.gate(s"reducer $r", parts.map { case (p, part) => GateInput(part.partitionId, r, r + 1, p.location) }.toIndexedSeq))
      @volatile var reading = true
      val sampler = async {
        var peak = 0
        while (reading) {
          peak = math.max(peak, b.networkBufferPool.numberOfRequiredSegments)
          Thread.sleep(1)
        }
        peak
      }
      val peaks =
        try {
          gates.map(g => async(readSampling(g))).zipWithIndex.map { case (f, r) =>
            val (read, peak) = await(f, 600000)
            assert(read == parts.indices.map(i => (i.toLong, r) -> 6).toMap, s"reducer $r read every record once")
            peak
          }
        } finally reading = false
      val peakRequired = await(sampler)
      parts.foreach { case (p, part) => p.partitionManager.releasePartition(part.partitionId, null) }
      (producers :+ b).foreach(_.assertNoCreditViolations())
      (producers :+ b).foreach(_.awaitAllBuffersBack())
      (peaks, peakRequired)
    }
  }

  test("a regular gate's network memory does not grow with the executors it reads from: 8 reducers at 2 and 256 executors") {
    val conf = SluiceConf(TestingExecutor.DefaultSettings)
    val bound = conf.get(SluiceOptions.MaxCreditWindow) // exclusive (at most maxRequired) + floating, either way
    val reducers = 8
    // 192 segments: the old rule (buffersPerChannel exclusive buffers per channel in flight, up to 128) asked
    // 256 of each gate at 256 executors, so not even one gate could have read.
    val (few, fewRequired) = shuffle(2, reducers, readerSegments = 192)
    val (many, manyRequired) = shuffle(256, reducers, readerSegments = 192)
    info(s"per gate peak network segments held: 2 executors ${few.map(_.held).max}, 256 executors ${many.map(_.held).max} " +
      s"(bound $bound); the reader's peak required segments: $fewRequired and $manyRequired for $reducers gates")
    few.foreach { p =>
      assert(p.held <= bound, s"2 executors: $p")
      assert(p.exclusive == conf.get(SluiceOptions.BuffersPerChannel), s"one remote channel keeps its exclusive buffers: $p")
    }
    many.foreach { p =>
      assert(p.held <= bound, s"256 executors: $p")
      assert(p.exclusive == 0, s"past maxRequiredBuffersPerGate the gate takes no exclusive buffer: $p")
      assert(p.channelsInFlight > bound, s"more channels read at once than the gate has buffers: $p")
    }
    assert(manyRequired <= fewRequired, "what the reducers require does not grow with the executors")
    assert(manyRequired <= reducers, s"each gate requires its floating pool's minimum only: $manyRequired")
  }

  test("floating only, channels far beyond buffers: credit reaches every channel in turn, no deadlock, no starvation") {
    val producers = (0 until 24).map(i => new TestingExecutor(s"P$i", Lean, Small, numSegments = 16))
    // Two gates of 24 remote channels over 4 segments: each gate's pool gets its minimum and a share of 2 more.
    val b = new TestingExecutor("B", Lean, Small, numSegments = 4)
    withExecutors(producers :+ b: _*) {
      val parts = producers.zipWithIndex.map { case (p, i) =>
        val part = p.blockingPartition(ResultPartitionID(42, i), 2, None, poolSize = 2)
        for (r <- 0 until 2) TestingRecords.writeMany(part, r, 12, 1800) // ~22 KB: six buffers per channel
        p.finish(part)
        (p, part)
      }
      val gates = (0 until 2).map(r =>
        b.gate(s"reducer $r", parts.map { case (p, part) => GateInput(part.partitionId, r, r + 1, p.location) }.toIndexedSeq))
      val reading = gates.map(g => async(readSampling(g)))
      reading.zipWithIndex.foreach { case (f, r) =>
        val (read, peak) = await(f, 300000)
        assert(read == parts.indices.map(i => (i.toLong, r) -> 12).toMap, s"reducer $r read every record once")
        assert(peak.held <= 4 && peak.exclusive == 0, s"$peak")
        assert(peak.channelsInFlight == 24, s"every channel requested at once: $peak")
      }
      parts.foreach { case (p, part) => p.partitionManager.releasePartition(part.partitionId, null) }
      (producers :+ b).foreach(_.assertNoCreditViolations())
      (producers :+ b).foreach(_.awaitAllBuffersBack())
    }
  }

  test("a starting gate takes its scratch and first exclusive buffers in one wait: two gates never each hold a part") {
    val codec = BlockCodec.forSparkCodec("lz4", 1)
    val exclusive = SluiceConf(TestingExecutor.DefaultSettings).get(SluiceOptions.BuffersPerChannel)
    val p = new TestingExecutor("P", Lean, Small, numSegments = 16)
    // Room for gate A (floating minimum, decompression scratch, its channel's exclusive buffers)
    // and for gate B's floating minimum and scratch, not for B's exclusive buffers too.
    val b = new TestingExecutor("B", Lean, Small, numSegments = (1 + 1 + exclusive) + 1 + 1)
    withExecutors(p, b) {
      val part = p.blockingPartition(ResultPartitionID(43, 0), 2, Some(codec), poolSize = 2)
      for (r <- 0 until 2) TestingRecords.writeMany(part, r, 12, 1800)
      p.finish(part)
      def gate(r: Int) =
        b.gate(s"reducer $r", IndexedSeq(GateInput(part.partitionId, r, r + 1, p.location)),
          codec = Some(BlockCodec.forSparkCodec("lz4", 1)))
      val a = gate(0)
      val second = gate(1)
      try {
        a.requestPartitions()
        assert(a.numScratchSegmentsHeld == 1 && a.numExclusiveSegmentsHeld == exclusive)
        val starting = async(second.requestPartitions())
        Thread.sleep(500)
        // Taking its scratch segment first and then waiting for its exclusive ones, B would hold a
        // part of what another starting gate needs while waiting for a part that gate holds.
        assert(!starting.isDone, "B waits: A holds what B needs")
        assert(second.numScratchSegmentsHeld == 0 && second.numExclusiveSegmentsHeld == 0,
          s"the waiting gate holds nothing while it waits: ${b.networkBufferPool}")
        val (readA, _) = readSampling(a)
        assert(readA == Map((0L, 0) -> 12))
        await(starting, 60000)
        val (readB, _) = readSampling(second)
        assert(readB == Map((0L, 1) -> 12))
      } finally { a.close(); second.close() }
      p.partitionManager.releasePartition(part.partitionId, null)
      Seq(p, b).foreach(_.assertNoCreditViolations())
      Seq(p, b).foreach(_.awaitAllBuffersBack())
    }
  }

  /**
   * `slots` reduce tasks of executor B at once, as a stage that reads one shuffle and writes
   * another runs them: each task's gate (one remote channel to P, one local channel over B's own
   * spilled map output, compressed) and its output partition are created before any task reads,
   * so every slot holds its minimums when the gates start. Each task reads its gate, writing a
   * record to its output per record read, then finishes the output and closes the gate; a task
   * that fails keeps both until every task is done. Returns each task's records per input, or its error.
   */
  private def slotsAtOnce(
      slots: Int, segments: Int, bufferRequestTimeout: String): Seq[Either[Throwable, Map[(Long, Int), Int]]] = {
    val codec = BlockCodec.forSparkCodec("lz4", 1)
    val p = new TestingExecutor("P", Lean, Small, numSegments = 16)
    val b = new TestingExecutor("B", Lean + (SluiceOptions.RequestBufferTimeout.key -> bufferRequestTimeout), Small,
      numSegments = segments)
    withExecutors(p, b) {
      val maps = Seq(p, b).zipWithIndex.map { case (e, i) =>
        val part = e.blockingPartition(ResultPartitionID(45, i), slots, Some(codec), poolSize = 2)
        for (r <- 0 until slots) TestingRecords.writeMany(part, r, 12, 1800)
        e.finish(part)
        (e, part)
      }
      val tasks = (0 until slots).map { r =>
        val gate =
          b.gate(s"reducer $r", maps.map { case (e, part) => GateInput(part.partitionId, r, r + 1, e.location) }.toIndexedSeq,
            codec = Some(BlockCodec.forSparkCodec("lz4", 1)))
        (gate, b.blockingPartition(ResultPartitionID(46, r), 1, Some(codec), poolSize = 2))
      }
      io.sluice.TestingThreads.eventually(what = "every slot holding its gate's and its output's minimum only")(
        b.networkBufferPool.numberOfRequiredSegments == slots * 2)
      val running = tasks.map { case (gate, out) =>
        async {
          val reader = new TestingGateReader(gate)
          try {
            var n = 0
            while (reader.readOne()) { TestingRecords.write(out, 0, TestingRecords.record(46, 0, n, 1800)); n += 1 }
            b.finish(out)
            val read = reader.readAll()
            reader.close()
            Right(read)
          } catch { case e: Throwable => reader.releaseCurrent(); Left(e) }
        }
      }
      val results = running.map(await(_, 600000))
      tasks.foreach { case (gate, out) =>
        gate.close()
        if (!out.isFinished) { out.release(new RuntimeException("task failed")); out.closeBufferBuilders() }
        b.partitionManager.releasePartition(out.partitionId, null)
      }
      maps.foreach { case (e, part) => e.partitionManager.releasePartition(part.partitionId, null) }
      Seq(p, b).foreach(_.assertNoCreditViolations())
      Seq(p, b).foreach(_.awaitAllBuffersBack())
      results
    }
  }

  test("at the least network memory an executor accepts, every task slot's gate started at once makes progress") {
    val slots = 3
    val least = SluiceConf(TestingExecutor.DefaultSettings ++ Lean).minPoolSegments(slots, compressed = true, remoteReads = true)
    val exclusive = SluiceConf(TestingExecutor.DefaultSettings).get(SluiceOptions.BuffersPerChannel)
    assert(least == slots * 2 + 2 + exclusive,
      "per slot a gate's floating and an output's minimum; a start's scratch and exclusive")
    slotsAtOnce(slots, least.toInt, "60s").zipWithIndex.foreach { case (result, r) =>
      assert(result == Right(Map((0L, r) -> 12, (1L, r) -> 12)), s"reducer $r read every record once")
    }
    // One segment less and no gate can start: each waits for what the others' minimums hold.
    slotsAtOnce(slots, least.toInt - 1, "2s").foreach {
      case Left(e: java.util.concurrent.TimeoutException) =>
        assert(e.getMessage.contains("spark.sluice.network.bufferRequestTimeout"), e.getMessage)
      case other => fail(s"a gate started below the least network memory: $other")
    }
  }
}

object GateBuffersSuite {

  /** What one reduce gate held, sampled on its task thread after every record. */
  final case class Peak(held: Int, exclusive: Int, channelsInFlight: Int)
}
