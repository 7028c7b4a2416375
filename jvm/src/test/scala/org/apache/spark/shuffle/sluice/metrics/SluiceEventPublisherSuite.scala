package org.apache.spark.shuffle.sluice.metrics

import scala.collection.mutable

import io.sluice.NettyLeakDetection
import io.sluice.config.SluiceConf
import io.sluice.metrics._
import org.apache.spark.SparkConf
import org.apache.spark.scheduler.{
  SparkListenerApplicationEnd, SparkListenerEvent, SparkListenerStageCompleted, SparkListenerStageSubmitted, StageInfo
}
import org.apache.spark.shuffle.sluice.rpc.SluiceMessages
import org.apache.spark.shuffle.sluice.ui.{ReplayedTabData, SluiceHistoryServerPlugin}
import org.apache.spark.shuffle.sluice.ui.{ReplayedTabData, SluiceHistoryServerPlugin}
import org.apache.spark.shuffle.sluice.{
  SluiceExecutorMemory, SparkListenerSluiceNetworkMemory, SparkListenerSluiceSettings, SparkListenerSluiceStageMetrics
}
import org.apache.spark.status.ElementTrackingStore
import org.apache.spark.util.JsonProtocol
import org.apache.spark.util.kvstore.InMemoryStore
import org.json4s._
import org.scalatest.funsuite.AnyFunSuite

class SluiceEventPublisherSuite extends AnyFunSuite with NettyLeakDetection {

  private val conf = SluiceConf(Seq("spark.sluice.metrics.reportInterval" -> "50ms"))
  private val segments = SegmentsSnapshot(32768, 100, 90, 10)

  private def report(m: SluiceDriverMetrics, tasks: TaskIOSnapshot*): Unit =
    m.onReport(SluiceMessages.Report(ExecutorSnapshot("1", 0, segments, tasks), Nil))

  private def stageInfo(stageId: Int, failed: Boolean = false): StageInfo = {
    val info = new StageInfo(stageId, 0, s"stage $stageId", 2, Nil, Nil, "", resourceProfileId = 0)
    if (failed) info.failureReason = Some("lost")
    info
  }

  private final class Recorder {
    val events = mutable.ArrayBuffer.empty[SparkListenerEvent]
    var now = 1000000L
    def stageEvents: Seq[SparkListenerSluiceStageMetrics] = events.collect { case e: SparkListenerSluiceStageMetrics => e }.toSeq
  }

  private def publisher(m: SluiceDriverMetrics, r: Recorder) =
    new SluiceEventPublisher(m, e => r.events += e, minIntervalMs = 10000L, clock = () => r.now)

  test("every event survives Spark's event-log JSON under its class name") {
    val m = new SluiceDriverMetrics(conf)
    report(m, TestingSnapshots.consumer(stageId = 3), TestingSnapshots.producer(stageId = 3, outPoolUsage = 0.5))
    val stage = SparkListenerSluiceStageMetrics.of(m.stageView(3), 42L)
    val events = Seq(stage, SparkListenerSluiceSettings(200, 5, 32768, 20, 10),
      SparkListenerSluiceNetworkMemory(Seq(SluiceExecutorMemory("1", 100, 90, 10, 32768, 7L)), 9L))
    for (event <- events) {
      val json = JsonProtocol.sparkEventToJsonString(event)
      assert(json.contains(s""""Event":"${event.getClass.getName}""""), json)
      assert(JsonProtocol.sparkEventFromJson(json) == event, json)
    }
    assert(stage.numRecordsIn == 10 && stage.numBytesInRemote == 1000 && stage.outPoolUsage == 0.5)
    assert(stage.suggestedBufferTimeoutMsOption.isEmpty == (stage.suggestedBufferTimeoutMs == -1.0))
  }

  test("a running stage is posted at most once per interval; a finished one at once; application end flushes") {
    val m = new SluiceDriverMetrics(conf)
    val r = new Recorder
    val p = publisher(m, r)
    m.stages.onStageSubmitted(SparkListenerStageSubmitted(stageInfo(5)))
    val first = TestingSnapshots.consumer(stageId = 5)
    report(m, first)
    p.onReport(Seq(5))
    assert(r.stageEvents.map(_.numRecordsIn) == Seq(10))
    assert(r.events.count(_.isInstanceOf[SparkListenerSluiceNetworkMemory]) == 1)

    // Running: new figures within the interval wait; after it they go.
    report(m, first.copy(numRecordsIn = 20))
    p.onReport(Seq(5))
    assert(r.stageEvents.size == 1)
    r.now += 10000L
    p.onReport(Seq(5))
    assert(r.stageEvents.map(_.numRecordsIn) == Seq(10, 20))
    p.onReport(Seq(5)) // nothing new: nothing posted
    assert(r.stageEvents.size == 2)

    // Spark ends the stage, then the task's last report comes: posted at once, without waiting.
    m.stages.onStageCompleted(SparkListenerStageCompleted(stageInfo(5)))
    p.onStageCompleted(SparkListenerStageCompleted(stageInfo(5)))
    assert(r.stageEvents.last.status == StageMeta.Complete)
    report(m, first.copy(numRecordsIn = 30, running = false))
    p.onReport(Seq(5))
    assert(r.stageEvents.last.numRecordsIn == 30 && r.stageEvents.last.runningTasks == 0)

    // A stage whose change waits for the interval is flushed at application end.
    m.stages.onStageSubmitted(SparkListenerStageSubmitted(stageInfo(6)))
    val other = TestingSnapshots.consumer(stageId = 6)
    report(m, other)
    p.onReport(Seq(6))
    report(m, other.copy(numRecordsIn = 99))
    p.onReport(Seq(6))
    val before = r.stageEvents.count(_.stageId == 6)
    p.onApplicationEnd(SparkListenerApplicationEnd(0L))
    assert(r.stageEvents.count(_.stageId == 6) == before + 1 && r.stageEvents.last.numRecordsIn == 99)
    // Stages without Sluice tasks are never posted.
    p.onStageCompleted(SparkListenerStageCompleted(stageInfo(8)))
    assert(!r.stageEvents.exists(_.stageId == 8))
  }

  test("the History Server's listener keeps each stage's last figures and the tab data serves them") {
    val m = new SluiceDriverMetrics(conf)
    val r = new Recorder
    val p = publisher(m, r)
    p.postSettings()
    report(m, TestingSnapshots.consumer(stageId = 1), TestingSnapshots.producer(stageId = 2))
    p.onReport(Seq(1, 2))
    report(m, TestingSnapshots.consumer(stageId = 1).copy(numRecordsIn = 77, running = false))
    p.flush()

    val store = new ElementTrackingStore(new InMemoryStore, new SparkConf)
    try {
      val listeners = new SluiceHistoryServerPlugin().createListeners(new SparkConf, store)
      // Through the event log's JSON, as the History Server reads it.
      r.events.map(e => JsonProtocol.sparkEventFromJson(JsonProtocol.sparkEventToJsonString(e)))
        .foreach(e => listeners.foreach(_.onOtherEvent(e)))
      val data = new ReplayedTabData(store)
      assert(data.settings.map(_.reportIntervalMs).contains(50L))
      assert(data.stages.map(_.stageId) == Seq(2, 1))
      // Two task attempts of stage 1 (10 and 77 records): the flushed total, not the first post's.
      assert(data.stages.find(_.stageId == 1).map(_.numRecordsIn).contains(87L))
      assert(data.executors.map(e => (e.executorId, e.usedMemorySegments)) == Seq(("1", 10)))
      // An executor that left is no longer in the last event, but keeps its last figures.
      listeners.foreach(_.onOtherEvent(
          SparkListenerSluiceNetworkMemory(Seq(SluiceExecutorMemory("2", 100, 100, 0, 32768, 5L)), 6L)))
      assert(data.executors.map(e => (e.executorId, e.usedMemorySegments)) == Seq(("1", 10), ("2", 0)))
      val JArray(stages) = data.json \ "stages": @unchecked
      assert(stages.map(_ \ "stage_id") == List(JInt(2), JInt(1)))
      assert(data.json \ "replayed" == JBool(true))
    } finally store.close()
  }
}
