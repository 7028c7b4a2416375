package io.sluice.metrics

import io.sluice.NettyLeakDetection
import io.sluice.TestingShuffleEnvironment._
import io.sluice.partition.ResultPartitionID
import io.sluice.writer.{ChannelSelector, LatencyMarkerEmitter, RecordSerializer, RecordWriter, SerializedRecord}
import org.scalatest.funsuite.AnyFunSuite

class LatencyStatsSuite extends AnyFunSuite with NettyLeakDetection {

  test("granularity decides which producers share a histogram") {
    val clock = new ManualClock
    def fed(g: LatencyGranularity): LatencyStats = {
      val stats = new LatencyStats(g, 128, clock)
      for (stage <- Seq(1, 2); index <- Seq(0, 1)) stats.reportLatency(clock.currentTimeMillis() - 10, stage, index)
      stats
    }
    assert(fed(LatencyGranularity.Single).snapshot.map(s => (s.sourceStage, s.sourceIndex)) == Seq((-1, -1)))
    assert(fed(LatencyGranularity.Operator).snapshot.map(s => (s.sourceStage, s.sourceIndex)) == Seq((1, -1), (2, -1)))
    assert(fed(LatencyGranularity.Subtask).snapshot.map(s => (s.sourceStage, s.sourceIndex)).toSet ==
      Set((1, 0), (1, 1), (2, 0), (2, 1)))
    assert(fed(LatencyGranularity.Single).snapshot.head.count == 4)
    assert(fed(LatencyGranularity.Subtask).total.get.count == 4)
  }

  test("a marker's latency is its age on the consumer's clock; the executor histogram sees every marker") {
    val clock = new ManualClock
    val executor = new LatencyHistogram(128)
    val stats = new LatencyStats(LatencyGranularity.Operator, 128, clock, Some(executor))
    (1 to 100).foreach(i => stats.reportLatency(clock.currentTimeMillis() - i, 7, i % 3))
    val s = stats.snapshot.head
    assert(s.count == 100 && s.min == 1 && s.max == 100 && s.mean == 50.5)
    assert(s.p50 == 50.5)
    assert(math.abs(s.p99 - 99.01) < 1e-9)
    assert(executor.count == 100)
    stats.reportLatency(clock.currentTimeMillis() + 5, 7, 0) // a producer clock ahead of ours: age 0, not negative
    assert(executor.values.last == 0)
  }

  test("statistics describe the last historySize values; count every value") {
    val h = new LatencyHistogram(4)
    (1 to 10).foreach(v => h.update(v.toLong))
    assert(h.values.toSeq == Seq(7L, 8L, 9L, 10L))
    val s = h.snapshot(-1, -1)
    assert(s.count == 10 && s.min == 7 && s.max == 10 && s.p50 == 8.5)
    assert(LatencyGranularity.parse(" Operator ") == LatencyGranularity.Operator)
    assertThrows[IllegalArgumentException](LatencyGranularity.parse("task"))
  }

  test("latency tracking off: no task and no executor histogram exists") {
    withEnvironment() { env =>
      val group = env.metrics.group(TaskKey(1, 0, 0, 1L))
      assert(group.latency.isEmpty)
      assert(group.sample().latency.isEmpty && group.sample().latencyTotal.isEmpty)
      assert(env.metrics.executorLatency.isEmpty)
      env.metrics.enableLatencyTracking(group, LatencyGranularity.Single)
      assert(group.latency.isDefined && env.metrics.executorLatency.isDefined)
    }
  }

  test("markers travel through the buffers behind the records and land in the reader's histograms") {
    withEnvironment() { env =>
      val clock = new ManualClock
      val id = ResultPartitionID(5, 0)
      val p = env.createPipelinedPartition(id, 2)
      env.registerPartition(p)
      val writer = new RecordWriter[Int](p,
        new ChannelSelector[Int] {
          override def numberOfChannels: Int = 2
          override def selectChannel(record: Int): Int = record % 2
        },
        new RecordSerializer[Int] {
          override def serialize(record: Int, subpartition: Int, target: SerializedRecord): Unit = {
            target.scratch.write(record); target.useScratch()
          }
        }, flushAlways = false)
      val emitter = new LatencyMarkerEmitter(writer, 3600000L, producerStage = 9, producerIndex = 4, clock,
        env.outputFlusher)
      (0 until 100).foreach { i => writer.emit(i); emitter.onRecord() }
      emitter.close()
      p.finish()
      assert(emitter.numEmitted == 1) // the first record; the interval never passed
      assert(p.numRecordsOut.sum() == 100) // markers are not records

      clock.advanceMillis(25)
      val group = new TaskIOMetricGroup(TaskKey(10, 0, 0, 2L), clock)
      val stats = group.enableLatencyTracking(LatencyGranularity.Subtask, 128, None)
      val read = drain(gate(env, 0, id), onMarker = (created, stage, index) => stats.reportLatency(created, stage, index))
      assert(read.records.size == 50)
      assert(read.markers == Seq((1000000L, 9, 4)))
      val s = group.sample().latency
      assert(s == Seq(LatencySnapshot(9, 4, 1, 25, 25, 25, 25, 25, 25, 25)))
    }
  }

  test("the emitter emits again once the timer says an interval has passed") {
    withEnvironment() { env =>
      val p = env.createPipelinedPartition(ResultPartitionID(6, 0), 1)
      val writer = new RecordWriter[Int](p,
        new ChannelSelector[Int] {
          override def numberOfChannels: Int = 1
          override def selectChannel(record: Int): Int = 0
        }, (record: Int, _: Int, target: SerializedRecord) => { target.scratch.write(record); target.useScratch() },
        flushAlways = false)
      val emitter = new LatencyMarkerEmitter(writer, 20L, 1, 0, SystemClock, env.outputFlusher)
      emitter.onRecord()
      val deadline = System.nanoTime() + 5000000000L
      while (emitter.numEmitted < 3 && System.nanoTime() < deadline) { Thread.sleep(5); emitter.onRecord() }
      emitter.close()
      assert(emitter.numEmitted >= 3)
      p.release(null)
      p.closeBufferBuilders() // the producer's clean-up, on its thread
    }
  }
}
