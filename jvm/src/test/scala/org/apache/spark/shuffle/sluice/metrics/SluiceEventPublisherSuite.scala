package org.apache.spark.shuffle.sluice.metrics

import scala.collection.mutable

import io.sluice.NettyLeakDetection
import io.sluice.config.SluiceConf
import io.sluice.metrics._
import java.util.Properties

import org.apache.spark.executor.{ExecutorMetrics, TaskMetrics}
import org.apache.spark.scheduler.{
  SparkListenerApplicationEnd, SparkListenerEvent, SparkListenerJobStart, SparkListenerStageCompleted,
  SparkListenerStageSubmitted, SparkListenerTaskEnd, StageInfo, TaskInfo, TaskLocality
}
import org.apache.spark.{SparkConf, Success}
import org.apache.spark.shuffle.sluice.rpc.SluiceMessages
import org.apache.spark.shuffle.sluice.ui.{ReplayedTabData, SluiceHistoryServerPlugin}
import org.apache.spark.shuffle.sluice.{
  SluiceExecutorMemory, SparkListenerSluiceApplicationSummary, SparkListenerSluiceNetworkMemory, SparkListenerSluiceSettings,
  SparkListenerSluiceStageMetrics
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
    // The summary is the last event: an executor's report arriving after it posts nothing.
    val posted = r.events.size
    report(m, other.copy(numRecordsIn = 100, running = false))
    p.onReport(Seq(6))
    assert(r.events.size == posted, r.events.drop(posted))
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

  /** A successful reduce task's end: `records` records of 1 KiB each in `runMs`. */
  private def taskEnd(stageId: Int, partition: Int, executor: String, runMs: Long, records: Long): SparkListenerTaskEnd = {
    val metrics = TaskMetrics.empty
    metrics.setExecutorRunTime(runMs)
    metrics.shuffleReadMetrics.setRemoteBytesRead(records * 1024)
    metrics.shuffleReadMetrics.setRecordsRead(records)
    metrics.shuffleReadMetrics.setFetchWaitTime(1)
    val info = new TaskInfo(100L + partition, partition, 0, partition, 0L, executor, "localhost", TaskLocality.ANY, false)
    SparkListenerTaskEnd(stageId, 0, "ResultTask", Success, info, new ExecutorMetrics, metrics)
  }

  test("a batch stage's diagnosis, jobs and SQL execution survive the event log; an older event reads without them") {
    val m = new SluiceDriverMetrics(conf)
    val props = new Properties
    props.setProperty("spark.jobGroup.id", "nightly")
    props.setProperty("spark.sql.execution.id", "12")
    m.stages.onJobStart(SparkListenerJobStart(7, 0L, Seq(stageInfo(4)), props))
    m.stages.onStageSubmitted(SparkListenerStageSubmitted(stageInfo(4), props))
    // Eight reduce tasks over two executors; partition 5 reads 10 times the others.
    (0 until 8).foreach(p => m.stages.onTaskEnd(taskEnd(4, p, (p % 2).toString, 1000, if (p == 5) 20000 else 2000)))
    report(m,
      (0 until 8).map(p =>
        TestingSnapshots.consumer(stageId = 4, partitionId = p)
          .copy(key = TaskKey(4, 0, p, 100L + p), running = false, bufferWaitMs = 3)): _*)
    val stage = SparkListenerSluiceStageMetrics.of(m.stageView(4), 42L)
    assert(stage.batch && stage.batchCause.startsWith("Skew: reduce partition 5 read 19.5 MiB, 10.0× the median"),
      stage.batchCause)
    assert(stage.rootCause == StageView.NotPipelined)
    assert(stage.jobIds == Seq(7) && stage.jobGroup == "nightly" && stage.sqlExecutionId == 12L)
    assert(stage.batchTasks == 8 && stage.executorRunTimeMs == 8000 && stage.fetchWaitMs == 8 && stage.bufferWaitMs == 24)
    val json = JsonProtocol.sparkEventToJsonString(stage)
    val back = JsonProtocol.sparkEventFromJson(json).asInstanceOf[SparkListenerSluiceStageMetrics]
    assert(back == stage && back.jobIdList == Seq(7), json)
    val batch = SluiceJson.stageMetrics(back) \ "batch"
    assert(batch \ "max_partition_id" == JInt(5) && batch \ "buffer_wait_ms" == JLong(24), batch)
    // A log written before these fields: no batch diagnosis, no jobs, no error.
    val newFields = Seq("jobIds", "jobGroup", "sqlExecutionId", "batch", "batchCause", "batchTasks", "executorRunTimeMs",
      "fetchWaitMs", "bufferWaitMs", "spillBytes", "maxPartitionId", "maxPartitionBytes", "medianPartitionBytes",
      "slowProducer", "slowProducerWaitMs", "slowExecutor", "slowExecutorRatio")
    val older = org.json4s.jackson.JsonMethods.parse(json).removeField { case (k, _) => newFields.contains(k) }
    val old = JsonProtocol.sparkEventFromJson(org.json4s.jackson.JsonMethods.compact(older))
      .asInstanceOf[SparkListenerSluiceStageMetrics]
    assert(!old.batch && old.jobIdList.isEmpty && old.numRecordsIn == stage.numRecordsIn)
    val oldJson = SluiceJson.stageMetrics(old)
    assert(oldJson \ "batch" == JNull && oldJson \ "job_ids" == JArray(Nil) && oldJson \ "job_group" == JNull)
  }

  test("at application end a one-line summary is posted: bytes, waits, the slowest stage and its cause; replayed") {
    val m = new SluiceDriverMetrics(conf)
    val r = new Recorder
    val p = publisher(m, r)
    def timed(stageId: Int, submitted: Long, completed: Long): StageInfo = {
      val info = stageInfo(stageId)
      info.submissionTime = Some(submitted)
      info.completionTime = Some(completed)
      info
    }
    m.stages.onStageSubmitted(SparkListenerStageSubmitted(timed(3, 1000L, 2000L)))
    m.stages.onStageCompleted(SparkListenerStageCompleted(timed(3, 1000L, 2000L)))
    m.stages.onStageSubmitted(SparkListenerStageSubmitted(timed(4, 2000L, 11000L)))
    (0 until 8).foreach(q => m.stages.onTaskEnd(taskEnd(4, q, (q % 2).toString, 1000, if (q == 5) 20000 else 2000)))
    m.stages.onStageCompleted(SparkListenerStageCompleted(timed(4, 2000L, 11000L)))
    report(m, TestingSnapshots.producer(stageId = 3, outputType = "blocking").copy(running = false))
    report(m,
      (0 until 8).map(q =>
        TestingSnapshots.consumer(stageId = 4, partitionId = q)
          .copy(key = TaskKey(4, 0, q, 100L + q), running = false, bufferWaitMs = 3)): _*)
    // Stage 5 ended just before the application: Spark's task ends are in, no executor report yet.
    m.stages.onStageSubmitted(SparkListenerStageSubmitted(timed(5, 11000L, 12000L)))
    (0 until 2).foreach(q => m.stages.onTaskEnd(taskEnd(5, q, "0", 500, 10)))
    m.stages.onStageCompleted(SparkListenerStageCompleted(timed(5, 11000L, 12000L)))
    p.onApplicationEnd(SparkListenerApplicationEnd(0L))

    val summaries = r.events.collect { case e: SparkListenerSluiceApplicationSummary => e }
    assert(summaries.size == 1)
    val s = summaries.head
    // Bytes: Spark's figures of stages 4 and 5 (remote only here), Sluice's of stage 3 (no Spark tasks).
    val sparkRemote = (0 until 8).map(q => (if (q == 5) 20000L else 2000L) * 1024).sum + 2 * 10 * 1024L
    val producer = m.stageView(3)
    assert(s.stages == 3 && s.bytesRemote == producer.numBytesInRemote + sparkRemote)
    assert(s.bytesShuffled == producer.numBytesInLocal + producer.numBytesInRemote + sparkRemote)
    assert(s.fetchWaitMs == 10 && s.bufferWaitMs == 24)
    assert(s.slowestStageId == 4 && s.slowestStageName == "stage 4" && s.slowestStageMs == 9000L)
    assert(s.slowestStageCause.startsWith("Skew: reduce partition 5"), s.slowestStageCause)
    assert(s.line.startsWith("Sluice summary: ") && s.line.contains("in 3 stages; reduce tasks waited 0.0 s for input"),
      s.line)
    assert(s.line.contains("slowest stage 4 (stage 4), 9.0 s: Skew: reduce partition 5"), s.line)
    assert(r.events.last eq s, "the summary follows the final flush")

    val store = new ElementTrackingStore(new InMemoryStore, new SparkConf)
    try {
      val listeners = new SluiceHistoryServerPlugin().createListeners(new SparkConf, store)
      val back = JsonProtocol.sparkEventFromJson(JsonProtocol.sparkEventToJsonString(s))
      assert(back == s)
      listeners.foreach(_.onOtherEvent(back))
      val data = new ReplayedTabData(store)
      assert(data.summary.contains(s))
      assert(data.json \ "summary" \ "line" == JString(s.line) && data.json \ "summary" \ "slowest_stage_id" == JInt(4))
    } finally store.close()

    // With another blocking shuffle manager, Spark's shuffling stages are not Sluice's.
    val other = new SluiceDriverMetrics(conf, blockingThroughSluice = false)
    other.stages.onTaskEnd(taskEnd(5, 0, "0", 500, 10))
    assert(SparkListenerSluiceApplicationSummary.of(other, 1L).stages == 0)

    // No stage shuffled through Sluice: still one line, without a slowest stage.
    val empty = SparkListenerSluiceApplicationSummary.of(new SluiceDriverMetrics(conf), 1L)
    assert(empty.slowestStageId == -1 && empty.line.endsWith("for network buffers."), empty.line)
  }
}
