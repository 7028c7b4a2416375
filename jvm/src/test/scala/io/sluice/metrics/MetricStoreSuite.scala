package io.sluice.metrics

import io.sluice.NettyLeakDetection
import io.sluice.metrics.TestingSnapshots._
import org.scalatest.funsuite.AnyFunSuite

class MetricStoreSuite extends AnyFunSuite with NettyLeakDetection {

  private val segments = SegmentsSnapshot(32768, 100, 90, 10)

  private def report(exec: String, at: Long, tasks: TaskIOSnapshot*) = ExecutorSnapshot(exec, at, segments, tasks)

  test("keeps the latest snapshot per task; a finished one is never replaced by a late running one") {
    val store = new MetricStore()
    val running = task(stageId = 1, taskAttemptId = 1).copy(numRecordsIn = 5)
    store.add(report("1", 10, running))
    val done = running.copy(running = false, numRecordsIn = 9)
    store.add(report("1", 20, done))
    store.add(report("1", 30, running))
    assert(store.taskEntries.map(_.snapshot) == Seq(done))
    assert(store.executorEntries == Seq(ExecutorEntry("1", 30, segments)))
    assert(store.runningTasks.isEmpty)
    store.add(report("2", 40).copy(totals = Map(MetricNames.NumRecordsIn -> 9L)))
    assert(store.executorEntries.map(_.totals.getOrElse(MetricNames.NumRecordsIn, 0L)) == Seq(0L, 9L))
  }

  test("tasks of a stage: the latest attempt only, by partition") {
    val store = new MetricStore()
    val a0 = task(stageId = 2, partitionId = 1, taskAttemptId = 1)
    val a1 = a0.copy(key = TaskKey(2, 1, 0, 5))
    val a1b = a0.copy(key = TaskKey(2, 1, 1, 4))
    store.add(report("1", 10, a0, a1, a1b, task(stageId = 3, taskAttemptId = 7)))
    assert(store.tasksOf(2).map(_.key.taskAttemptId) == Seq(5L, 4L))
    assert(store.stageIds == Seq(2, 3))
  }

  test("bounded: finished tasks go first; a lost executor's running tasks end") {
    val store = new MetricStore(maxTasks = 2)
    store.add(report("1", 10, task(taskAttemptId = 1, running = false), task(taskAttemptId = 2), task(taskAttemptId = 3)))
    assert(store.taskEntries.map(_.key.taskAttemptId) == Seq(2L, 3L))
    store.removeExecutor("1")
    assert(store.taskEntries.forall(!_.snapshot.running) && store.executorEntries.isEmpty)
    assert(store.executorsSince(0).isEmpty)
  }
}
