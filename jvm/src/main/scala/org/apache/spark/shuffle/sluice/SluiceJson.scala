package org.apache.spark.shuffle.sluice

import io.sluice.metrics._
import org.json4s._
import org.json4s.jackson.JsonMethods

/**
 * The JSON form of the driver's Sluice metrics, shared by the UI tab's `/sluice/json` and the
 * Python accessor: `executors` (memory segments), `stages` (sums, highest usages, backpressure,
 * root cause) and `tasks` (one object per task attempt, every metric under its Flink name, and
 * latency statistics when tracked). Plain values only; no NaN. Stateless.
 */
private[sluice] object SluiceJson {

  private def num(v: Double): JValue = if (v.isNaN || v.isInfinite) JNull else JDouble(v)
  private def opt(v: Option[Double]): JValue = v.map(num).getOrElse(JNull)

  def latency(l: LatencySnapshot): JValue = JObject(
    "source_stage_id" -> JInt(l.sourceStage), "source_partition_id" -> JInt(l.sourceIndex),
    "count" -> JLong(l.count), "min" -> num(l.min), "max" -> num(l.max), "mean" -> num(l.mean),
    "p50" -> num(l.p50), "p95" -> num(l.p95), "p99" -> num(l.p99), "p999" -> num(l.p999))

  def task(e: TaskEntry): JValue = {
    val s = e.snapshot
    val metrics = s.metrics.map {
      case (n, v: Long) => n -> JLong(v)
      case (n, v: Int) => n -> JInt(v)
      case (n, v: Double) => n -> num(v)
      case (n, v) => n -> JString(v.toString)
    }
    JObject(List(
      "executor_id" -> JString(e.executorId), "stage_id" -> JInt(s.key.stageId),
      "stage_attempt_id" -> JInt(s.key.stageAttemptId), "partition_id" -> JInt(s.key.partitionId),
      "task_attempt_id" -> JLong(s.key.taskAttemptId), "running" -> JBool(s.running),
      "output_type" -> JString(s.outputType), "bufferTimeoutMs" -> s.bufferTimeoutMs.map(JLong(_)).getOrElse(JNull),
      "started_at_ms" -> JLong(s.startedAtMillis),
      "timestamp_ms" -> JLong(s.timestampMillis)) ++ metrics ++ List(
      "latency_total" -> s.latencyTotal.map(latency).getOrElse(JNull),
      "latency" -> JArray(s.latency.map(latency).toList)))
  }

  def backPressure(b: StageBackPressure): JValue = JObject(
    "ratio" -> num(b.ratio), "level" -> JString(b.level.name), "request_id" -> JLong(b.requestId),
    "timestamp_ms" -> JLong(b.endTimestampMillis), "sampled_tasks" -> JInt(b.tasks.size),
    "num_samples" -> JInt(b.numSamples), "executors_asked" -> JInt(b.executorsAsked),
    "executors_answered" -> JInt(b.executorsAnswered),
    "tasks" -> JArray(b.tasks.map { t =>
      JObject("executor_id" -> JString(t.executorId), "partition_id" -> JInt(t.sample.key.partitionId),
        "task_attempt_id" -> JLong(t.sample.key.taskAttemptId), "blocked" -> JInt(t.sample.blocked),
        "samples" -> JInt(t.sample.total), "ratio" -> num(t.ratio), "level" -> JString(t.level.name))
    }.toList))

  def stage(v: StageView): JValue = JObject(
    "stage_id" -> JInt(v.stageId), "stage_attempt_id" -> JInt(v.attemptId), "name" -> JString(v.name),
    "status" -> JString(v.status), "parent_ids" -> JArray(v.meta.map(_.parentIds).getOrElse(Nil).map(JInt(_)).toList),
    "num_tasks" -> JInt(v.meta.fold(v.tasks.size)(_.numTasks)), "reported_tasks" -> JInt(v.tasks.size),
    "running_tasks" -> JInt(v.runningTasks),
    MetricNames.NumRecordsOut -> JLong(v.numRecordsOut), MetricNames.NumRecordsIn -> JLong(v.numRecordsIn),
    MetricNames.NumBytesOut -> JLong(v.numBytesOut), MetricNames.NumBytesIn -> JLong(v.numBytesIn),
    MetricNames.NumBytesInLocal -> JLong(v.numBytesInLocal),
    MetricNames.NumBytesInRemote -> JLong(v.numBytesInRemote), MetricNames.NumBuffersOut -> JLong(v.numBuffersOut),
    MetricNames.NumBuffersInLocal -> JLong(v.numBuffersInLocal),
    MetricNames.NumBuffersInRemote -> JLong(v.numBuffersInRemote),
    MetricNames.OutPoolUsage -> num(v.outPoolUsage), MetricNames.InPoolUsage -> num(v.inPoolUsage),
    MetricNames.FloatingBuffersUsage -> num(v.floatingBuffersUsage),
    MetricNames.ExclusiveBuffersUsage -> num(v.exclusiveBuffersUsage),
    MetricNames.BackPressuredTimeMsPerSecond -> num(v.backPressuredTimeMsPerSecond),
    "ratio" -> num(v.ratio), "level" -> JString(v.level.name),
    "backpressure" -> v.backPressure.map(backPressure).getOrElse(JNull), "sampling" -> JBool(v.sampling),
    "root_cause" -> JString(v.diagnosis.rootCause), "buffer_fill_rate" -> opt(v.diagnosis.bufferFillRate),
    "suggested_buffer_timeout_ms" -> opt(v.diagnosis.suggestedBufferTimeoutMs))

  def executor(e: ExecutorEntry): JValue = JObject(
    "executor_id" -> JString(e.executorId), "last_report_ms" -> JLong(e.lastReportMillis),
    "segment_size" -> JInt(e.segments.segmentSize),
    MetricNames.TotalMemorySegments -> JInt(e.segments.total),
    MetricNames.AvailableMemorySegments -> JInt(e.segments.available),
    MetricNames.UsedMemorySegments -> JInt(e.segments.used),
    "server_port" -> JInt(e.transport.serverPort), "server_connections" -> JInt(e.transport.serverConnections),
    "client_connections" -> JInt(e.transport.clientConnections))

  /** Everything the driver holds. */
  def all(m: SluiceDriverMetrics): JValue = JObject(
    "report_interval_ms" -> JLong(m.reportIntervalMs),
    "executors" -> JArray(m.store.executorEntries.map(executor).toList),
    "stages" -> JArray(m.stageViews.map(stage).toList),
    "tasks" -> JArray(m.store.taskEntries.sortBy(e => (e.key.stageId, e.key.partitionId, e.key.taskAttemptId))
      .map(task).toList))

  def stages(views: Seq[StageView]): JValue = JObject("stages" -> JArray(views.map(stage).toList))

  val empty: JValue = JObject("report_interval_ms" -> JLong(0), "executors" -> JArray(Nil),
    "stages" -> JArray(Nil), "tasks" -> JArray(Nil))

  def render(v: JValue): String = JsonMethods.compact(JsonMethods.render(v))
}
