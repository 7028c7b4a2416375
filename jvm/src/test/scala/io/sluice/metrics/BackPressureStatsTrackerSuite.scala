package io.sluice.metrics

import java.util.concurrent.TimeUnit

import io.sluice.NettyLeakDetection
import org.scalatest.funsuite.AnyFunSuite

class BackPressureStatsTrackerSuite extends AnyFunSuite with NettyLeakDetection {

  test("levels: OK up to 0.10, LOW up to 0.5, HIGH above (Flink's thresholds)") {
    assert(BackPressureLevel.of(0.0) == BackPressureLevel.Ok)
    assert(BackPressureLevel.of(0.10) == BackPressureLevel.Ok)
    assert(BackPressureLevel.of(0.11) == BackPressureLevel.Low)
    assert(BackPressureLevel.of(0.5) == BackPressureLevel.Low)
    assert(BackPressureLevel.of(0.51) == BackPressureLevel.High)
    assert(BackPressureLevel.of(1.0) == BackPressureLevel.High)
    assert(Seq(BackPressureLevel.Ok, BackPressureLevel.Low, BackPressureLevel.High).map(_.name) == Seq("OK", "LOW", "HIGH"))
  }

  private def sample(stage: Int, partition: Int, blocked: Int, total: Int) =
    TaskSample(TaskKey(stage, 0, partition, partition + 100L), blocked, total)

  test("a request reaches each executor once; the stage's ratio is its highest task's") {
    val clock = new ManualClock
    val t = new BackPressureStatsTracker(10, 50, refreshIntervalMs = 60000, answerSlackMs = 5000, clock)
    val f = t.request(3, Set("1", "2"))
    assert(!f.isDone && t.isInFlight(3))
    assert(t.request(3, Set("1", "2")) eq f) // the request in flight is shared
    val req = t.requestsFor("1")
    assert(req == Seq(SampleRequest(1L, 3, 10, 50)))
    assert(t.requestsFor("1").isEmpty)
    assert(t.requestsFor("3").isEmpty) // not asked
    assert(t.requestsFor("2") == req)
    t.onResult(StageSampleResult(1L, 3, "1", Seq(sample(3, 0, 1, 10), sample(3, 1, 4, 10))))
    assert(!f.isDone)
    t.onResult(StageSampleResult(1L, 3, "2", Seq(sample(3, 2, 8, 10))))
    val r = f.get(1, TimeUnit.SECONDS)
    assert(r.tasks.map(_.ratio) == Seq(0.1, 0.4, 0.8))
    assert(r.tasks.map(_.level) == Seq(BackPressureLevel.Ok, BackPressureLevel.Low, BackPressureLevel.High))
    assert(r.tasks.map(_.executorId) == Seq("1", "1", "2"))
    assert(r.ratio == 0.8 && r.level == BackPressureLevel.High && r.numSamples == 30)
    assert(r.executorsAsked == 2 && r.executorsAnswered == 2)
    assert(!t.isInFlight(3) && t.latest(3).contains(r))
  }

  test("results stay fresh for the refresh interval; then (or when forced) the stage is sampled again") {
    val clock = new ManualClock
    val t = new BackPressureStatsTracker(10, 50, refreshIntervalMs = 1000, answerSlackMs = 5000, clock)
    t.request(1, Set("1"))
    t.requestsFor("1")
    t.onResult(StageSampleResult(1L, 1, "1", Seq(sample(1, 0, 0, 10))))
    clock.advanceMillis(500)
    assert(t.request(1, Set("1")).isDone)
    assert(t.requestsFor("1").isEmpty)
    assert(!t.request(1, Set("1"), force = true).isDone)
    assert(t.requestsFor("1").map(_.requestId) == Seq(2L))
    clock.advanceMillis(10000) // past the deadline of request 2: it completes with what it has
    t.expire()
    assert(t.latest(1).map(_.requestId).contains(2L))
    clock.advanceMillis(2000)
    assert(!t.request(1, Set("1")).isDone)
  }

  test("an executor that never answers does not block the result past the deadline; late answers are dropped") {
    val clock = new ManualClock
    val t = new BackPressureStatsTracker(10, 50, refreshIntervalMs = 1000, answerSlackMs = 2000, clock)
    val f = t.request(5, Set("1", "2"))
    t.requestsFor("1")
    t.onResult(StageSampleResult(1L, 5, "1", Seq(sample(5, 0, 3, 10))))
    clock.advanceMillis(10 * 50 + 2000)
    t.requestsFor("2") // any executor's next report expires overdue requests
    val r = f.get(1, TimeUnit.SECONDS)
    assert(r.executorsAsked == 2 && r.executorsAnswered == 1 && r.ratio == 0.3 && r.level == BackPressureLevel.Low)
    t.onResult(StageSampleResult(1L, 5, "2", Seq(sample(5, 1, 10, 10))))
    assert(t.latest(5).contains(r))
  }

  test("with no executor to ask, a stage is OK at once with nothing sampled") {
    val t = new BackPressureStatsTracker(10, 50, 1000, 2000, new ManualClock)
    val r = t.request(2, Set.empty).get(1, TimeUnit.SECONDS)
    assert(r.tasks.isEmpty && r.ratio == 0.0 && r.level == BackPressureLevel.Ok)
  }
}
