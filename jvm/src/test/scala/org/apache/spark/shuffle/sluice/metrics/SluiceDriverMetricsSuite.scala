package org.apache.spark.shuffle.sluice.metrics

import io.sluice.NettyLeakDetection
import io.sluice.config.SluiceConf
import io.sluice.metrics._
import org.apache.spark.shuffle.sluice.SluiceMetricsAccessor
import org.apache.spark.shuffle.sluice.rpc.SluiceMessages
import org.json4s.jackson.JsonMethods
import org.json4s._
import org.scalatest.funsuite.AnyFunSuite

class SluiceDriverMetricsSuite extends AnyFunSuite with NettyLeakDetection {

  private val conf = SluiceConf(Seq("spark.sluice.metrics.reportInterval" -> "50ms",
      "spark.sluice.backpressure.numSamples" -> "5", "spark.sluice.backpressure.delayBetweenSamples" -> "1ms"))
  private val segments = SegmentsSnapshot(32768, 100, 100, 0)

  private def report(exec: String, tasks: Seq[TaskIOSnapshot], samples: Seq[StageSampleResult] = Nil) =
    SluiceMessages.Report(ExecutorSnapshot(exec, 0, segments, tasks), samples)

  test("reports fill the store; sampling requests ride on the replies and answers come back with reports") {
    val m = new SluiceDriverMetrics(conf)
    val task = TestingSnapshots.producer(stageId = 4, outPoolUsage = 1.0, outputType = "pipelined")
    assert(m.onReport(report("1", Seq(task))).requests.isEmpty)
    assert(m.liveExecutors == Set("1") && m.isRunning(4))

    // A fake executor: answers every request it gets with its task blocked in 4 of 5 samples.
    @volatile var stop = false
    val executor = new Thread(() => {
      var answers = Seq.empty[StageSampleResult]
      while (!stop) {
        val reply = m.onReport(report("1", Seq(task), answers))
        answers = reply.requests.map(r => StageSampleResult(r.requestId, r.stageId, "1", Seq(TaskSample(task.key, 4, 5))))
        Thread.sleep(10)
      }
    })
    executor.start()
    try {
      val view = m.backPressure(Seq(4), m.backPressureTimeoutMs).head
      assert(view.backPressure.map(_.ratio).contains(0.8) && view.level == BackPressureLevel.High)
      assert(view.diagnosis.rootCause.contains("backpressured by its consumers"))
      assert(m.awaitFreshReports(5000))
    } finally { stop = true; executor.join() }

    val json = JsonMethods.parse(SluiceJson.render(SluiceJson.all(m)))
    val JArray(stages) = json \ "stages": @unchecked
    assert(stages.map(s => (s \ "stage_id", s \ "backpressure_level")) == List((JInt(4), JString("HIGH"))))
    val JArray(tasks) = json \ "tasks": @unchecked
    assert((tasks.head \ "outPoolUsage") == JDouble(1.0) && (tasks.head \ "executor_id") == JString("1"))
    assert((json \ "executors" \ "TotalMemorySegments") == JArray(List(JInt(100))))
  }

  test("a stage that no executor runs answers at once; nothing blocks without executors") {
    val m = new SluiceDriverMetrics(conf)
    val start = System.nanoTime()
    val view = m.backPressure(Seq(7), 10000).head
    assert((System.nanoTime() - start) / 1000000L < 2000)
    assert(view.backPressure.isEmpty && view.level == BackPressureLevel.Ok)
    assert(m.awaitFreshReports(100)) // no live executor to wait for
  }

  test("the accessor says so when the plugin is not running") {
    SluiceDriverMetrics.get.foreach(SluiceDriverMetrics.clear)
    assert(SluiceMetricsAccessor.metricsJson(false).contains("plugin is not running"))
    assert(SluiceMetricsAccessor.backpressureJson(-1).contains("plugin is not running"))
  }
}
