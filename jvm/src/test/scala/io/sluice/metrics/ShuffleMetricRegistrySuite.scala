package io.sluice.metrics

import io.sluice.NettyLeakDetection
import io.sluice.memory.NetworkBufferPool
import io.sluice.TestingShuffleEnvironment._
import io.sluice.partition.ResultPartitionID
import org.scalatest.funsuite.AnyFunSuite

class ShuffleMetricRegistrySuite extends AnyFunSuite with NettyLeakDetection {

  private def key(tid: Long) = TaskKey(1, 0, tid.toInt, tid)

  test("one group per task attempt; a finished task is reported once and then kept, bounded") {
    val pool = new NetworkBufferPool(8, 4096)
    val registry = new ShuffleMetricRegistry("exec-1", pool, SystemClock, maxFinished = 2, maxUnreported = 3)
    val g1 = registry.group(key(1))
    assert(registry.group(key(1)) eq g1)
    g1.numRecordsIn.inc(5)
    registry.group(key(2)).numRecordsIn.inc(7)
    registry.group(key(3)).numRecordsIn.inc(11)

    val first = registry.tick()
    assert(first.tasks.map(_.key.taskAttemptId).sorted == Seq(1L, 2L, 3L) && first.tasks.forall(_.running))
    assert(registry.finish(key(1)).map(_.numRecordsIn).contains(5L))
    assert(registry.finish(key(1)).isEmpty) // already finished: nothing is reported twice
    registry.finish(key(2))
    registry.finish(key(3))
    val second = registry.tick()
    assert(second.tasks.map(t => (t.key.taskAttemptId, t.running)).sortBy(_._1) ==
      Seq((1L, false), (2L, false), (3L, false)))
    assert(registry.tick().tasks.isEmpty)
    // Only the last two finished tasks are retained, but the executor totals count all three.
    assert(registry.snapshot().tasks.map(_.key.taskAttemptId) == Seq(2L, 3L))
    assert(registry.totals(MetricNames.NumRecordsIn) == 23L)
    assert(registry.numLiveGroups == 0)
    // More tasks finishing between two reports than the report may carry: the oldest are dropped.
    (4L to 8L).foreach { t => registry.group(key(t)); registry.finish(key(t)) }
    assert(registry.tick().tasks.map(_.key.taskAttemptId) == Seq(6L, 7L, 8L))
  }

  test("segments: total, available and used memory segments of the executor") {
    withEnvironment() { env =>
      val before = env.metrics.segments
      assert(before == SegmentsSnapshot(4096, 256, 256, 0))
      val p = env.createPipelinedPartition(ResultPartitionID(1, 0), 1)
      (1 to 9).foreach(_ => p.emitRecord(0, record(1000), ByteArrayOffset, 1000))
      val during = env.metrics.segments
      assert(during.used == 3 && during.available == 253 && during.total == 256)
      p.release(null)
      assert(env.metrics.segments.used == 1) // the buffer the producer still writes is its own
      p.closeBufferBuilders()
      assert(env.metrics.segments.used == 0)
    }
  }

  test("executor aggregates: the highest usage of running tasks, summed queues, executor rates") {
    withEnvironment() { env =>
      val p = env.createPipelinedPartition(ResultPartitionID(2, 0), 1)
      env.metrics.group(key(1)).attachPartition(p)
      env.metrics.group(key(2))
      (1 to 9).foreach(_ => p.emitRecord(0, record(1000), ByteArrayOffset, 1000))
      val report = env.metrics.tick()
      assert(report.totals == env.metrics.totals && report.totals(MetricNames.NumRecordsOut) == 9)
      assert(report.rates.keySet == MetricNames.Rates.toSet)
      val a = env.metrics.aggregate
      assert(a.outPoolUsage == 0.3 && a.outputQueueLength == 3)
      assert(a.rates.keySet == MetricNames.Rates.toSet)
      assert(env.metrics.totals(MetricNames.NumRecordsOut) == 9)
      p.release(null)
      p.closeBufferBuilders() // the producer's clean-up, on its thread
    }
  }
}
