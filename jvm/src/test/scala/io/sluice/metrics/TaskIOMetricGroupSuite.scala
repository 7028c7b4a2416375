package io.sluice.metrics

import io.sluice.NettyLeakDetection
import io.sluice.TestingShuffleEnvironment._
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.{BufferAndAvailability, InputChannel, ProducerLocation, SingleInputGate}
import org.scalatest.funsuite.AnyFunSuite

class TaskIOMetricGroupSuite extends AnyFunSuite with NettyLeakDetection {

  private val key = TaskKey(stageId = 3, stageAttemptId = 0, partitionId = 1, taskAttemptId = 42L)

  test("counters are read from the attached partition and gate, and numRecordsIn from the reader") {
    withEnvironment() { env =>
      val id = ResultPartitionID(0, 0)
      val p = env.createPipelinedPartition(id, 2)
      env.registerPartition(p)
      (1 to 10).foreach(_ => p.emitRecord(0, record(100), ByteArrayOffset, 100))
      (1 to 5).foreach(_ => p.emitRecord(1, record(100), ByteArrayOffset, 100))
      p.finish()

      val writer = new TaskIOMetricGroup(key, SystemClock)
      writer.attachPartition(p)
      val reader = new TaskIOMetricGroup(key.copy(stageId = 4, taskAttemptId = 43L), SystemClock)
      val g0 = gate(env, 0, id)
      val g1 = gate(env, 1, id)
      reader.attachInputGate(g0)
      reader.attachInputGate(g1)
      val read = drain(g0, () => reader.numRecordsIn.inc()).records.size + drain(g1, () => reader.numRecordsIn.inc()).records.size
      assert(read == 15)

      val w = writer.sample()
      assert(w.numRecordsOut == 15)
      assert(w.numBytesOut == 15 * (4 + 100))
      assert(w.numBuffersOut == 2) // one (finished, partly filled) buffer per subpartition
      assert(w.outputType == "pipelined")
      val r = reader.sample()
      assert(r.numRecordsIn == 15)
      assert(r.numBytesInLocal == w.numBytesOut)
      assert(r.numBytesIn == w.numBytesOut) // nothing compressed: as sent and as consumed are the same bytes
      assert(r.numBuffersInLocal == 2)
      assert(r.numBytesInRemote == 0 && r.numBuffersInRemote == 0)
      assert(r.inPoolUsage == 0.0 && r.floatingBuffersUsage == 0.0 && r.exclusiveBuffersUsage == 0.0)
      assert(r.inputQueueLength == 0) // local channels have no queue of their own (FLINK-12576)
      assert(r.outputType == "")
      g0.close(); g1.close()
    }
  }

  test("outPoolUsage is the partition pool's used buffers over its size; outputQueueLength its queued buffers") {
    withEnvironment() { env =>
      val p = env.createPipelinedPartition(ResultPartitionID(1, 0), 1)
      val group = new TaskIOMetricGroup(key, SystemClock)
      group.attachPartition(p)
      assert(group.sample().outPoolUsage == 0.0)
      // Two full 4 KiB buffers and a third being written; nobody reads.
      (1 to 9).foreach(_ => p.emitRecord(0, record(1000), ByteArrayOffset, 1000))
      val s = group.sample()
      assert(p.bufferPool.numUsedBuffers == 3)
      assert(s.outPoolUsage == 3.0 / p.bufferPool.numBuffers)
      assert(s.outPoolUsage == 0.3) // a pool of 1 x 2 exclusive + 8 floating buffers
      assert(s.outputQueueLength == 3)
      p.release(null)
      p.closeBufferBuilders() // the producer's clean-up, on its thread
    }
  }

  test("inPoolUsage combines floating and exclusive buffers as Flink's gauges do, through the channel hooks") {
    withEnvironment() { env =>
      val floating = env.networkBufferPool.createBufferPool(0, 8, "test gate")
      val g = new SingleInputGate("test gate", env.networkBufferPool, floating, None, 1000L, 1000L)
      g.setChannels(Array(new FakeRemoteChannel(g, exclusive = 2, exclusiveUsed = 1, floatingAvailable = 1)))
      val taken = (1 to 3).map(_ => floating.requestBuffer())
      val group = new TaskIOMetricGroup(key, SystemClock)
      group.attachInputGate(g)
      val s = group.sample()
      // floating: 3 taken, 1 of them still unused at the channel -> 2 of 8; exclusive: 1 of 2.
      assert(s.floatingBuffersUsage == 2.0 / 8)
      assert(s.exclusiveBuffersUsage == 0.5)
      assert(s.inPoolUsage == (2.0 + 1) / (8 + 2))
      assert(s.inputQueueLength == 4)
      taken.foreach(_.release())
      g.close()
    }
  }

  test("rates are per second over the meter window") {
    withEnvironment() { env =>
      val clock = new ManualClock
      val p = env.createPipelinedPartition(ResultPartitionID(2, 0), 1)
      val group = new TaskIOMetricGroup(key, clock, rateWindow = 5)
      group.attachPartition(p)
      (1 to 100).foreach(_ => p.emitRecord(0, record(6), ByteArrayOffset, 6))
      clock.advanceMillis(1000)
      val first = group.sample()
      assert(first.numRecordsOutPerSecond == 100.0)
      assert(first.numBytesOutPerSecond == 1000.0)
      (1 to 50).foreach(_ => p.emitRecord(0, record(6), ByteArrayOffset, 6))
      clock.advanceMillis(1000)
      assert(group.sample().numRecordsOutPerSecond == 75.0) // 150 records over the 2 s the window spans
      clock.advanceMillis(2000)
      assert(group.sample().numRecordsOutPerSecond == 150.0 / 4)
      p.release(null)
      p.closeBufferBuilders() // the producer's clean-up, on its thread
    }
  }

  test("time shares: backPressured and idle time per second, busy the rest (modern Flink)") {
    withEnvironment() { env =>
      val clock = new ManualClock
      val p = env.createPipelinedPartition(ResultPartitionID(3, 0), 1)
      val floating = env.networkBufferPool.createBufferPool(0, 8, "test gate")
      val g = new SingleInputGate("test gate", env.networkBufferPool, floating, None, 1000L, 1000L)
      g.setChannels(Array.empty)
      val group = new TaskIOMetricGroup(key, clock)
      group.attachPartition(p)
      group.attachInputGate(g)
      p.backPressuredTimeNanos.add(250L * 1000000L)
      g.idleTimeNanos.add(500L * 1000000L)
      clock.advanceMillis(1000)
      val s = group.sample()
      assert(s.backPressuredTimeMsPerSecond == 250.0)
      assert(s.idleTimeMsPerSecond == 500.0)
      assert(s.busyTimeMsPerSecond == 250.0)
      p.release(null); g.close()
    }
  }

  test("a finished task keeps its final counters and the pool usages last sampled while it ran") {
    withEnvironment() { env =>
      val p = env.createPipelinedPartition(ResultPartitionID(4, 0), 1)
      val group = new TaskIOMetricGroup(key, SystemClock)
      group.attachPartition(p)
      (1 to 9).foreach(_ => p.emitRecord(0, record(1000), ByteArrayOffset, 1000))
      val live = group.sample()
      assert(live.running && live.outPoolUsage == 0.3)
      p.emitRecord(0, record(10), ByteArrayOffset, 10)
      p.release(null) // its pool is destroyed: a live read would say 0
      p.closeBufferBuilders() // the producer's clean-up, on its thread
      val done = group.finish()
      assert(!done.running)
      assert(done.numRecordsOut == 10)
      assert(done.outPoolUsage == live.outPoolUsage && done.outputQueueLength == live.outputQueueLength)
      assert(group.sample() == done && group.finish() == done)
      assert(group.currentCounters.head == 10)
    }
  }

  /** A remote channel as the coming transport will report its buffers; holds none for real. */
  private final class FakeRemoteChannel(g: SingleInputGate, exclusive: Int, exclusiveUsed: Int, floatingAvailable: Int)
    extends InputChannel(g, 0, ResultPartitionID(9, 9), 0, 1, ProducerLocation("exec-2", "localhost", 1)) {
    override def requestSubpartitions(): Unit = ()
    override def getNextBuffer(): BufferAndAvailability = null
    override def releaseAllResources(): Unit = ()
    override def isRemote: Boolean = true
    override def numQueuedBuffers: Int = 4
    override def numExclusiveBuffers: Int = exclusive
    override def numExclusiveBuffersUsed: Int = exclusiveUsed
    override def numFloatingBuffersAvailable: Int = floatingAvailable
  }
}
