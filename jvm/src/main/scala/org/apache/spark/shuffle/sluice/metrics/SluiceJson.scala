package org.apache.spark.shuffle.sluice.metrics

import io.sluice.metrics._
import org.apache.spark.shuffle.sluice.{
  SluiceExecutorMemory, SparkListenerSluiceApplicationSummary, SparkListenerSluiceStageMetrics
}
import org.json4s._
import org.json4s.jackson.JsonMethods

/**
 * The JSON form of the driver's Sluice metrics, shared by the UI tab's `/sluice/json` and the
 * Python accessor: `executors` (memory segments), `stages` (sums, highest usages, backpressure,
 * the stage's `cause`: the batch diagnosis of a batch stage, the backpressure sentence of a
 * pipelined one; jobs), `tasks` (one object per task attempt, every metric under its Flink name,
 * and latency statistics when tracked) and `node_services` (the node shuffle services and the
 * executors whose outputs they serve). Keys follow the naming rule of docs/metrics.md: Flink's
 * metric names where a value is that metric, snake_case for everything else, the same words as the
 * Python tables. Plain values only; no NaN. Stateless.
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
      "output_type" -> JString(s.outputType), "buffer_timeout_ms" -> s.bufferTimeoutMs.map(JLong(_)).getOrElse(JNull),
      "started_at_ms" -> JLong(s.startedAtMillis),
      "timestamp_ms" -> JLong(s.timestampMillis), "buffer_wait_ms" -> JLong(s.bufferWaitMs),
      "input_wait_by_producer_ms" -> JObject(
        s.inputWaitByProducerMs.toList.sorted.map { case (k, v) => k -> JLong(v) })) ++ metrics ++ List(
      "latency_total" -> s.latencyTotal.map(latency).getOrElse(JNull),
      "latency" -> JArray(s.latency.map(latency).toList)))
  }

  def backPressure(b: StageBackPressure): JValue = JObject(
    "backpressure_ratio" -> num(b.ratio), "backpressure_level" -> JString(b.level.name), "request_id" -> JLong(b.requestId),
    "timestamp_ms" -> JLong(b.endTimestampMillis), "sampled_tasks" -> JInt(b.tasks.size),
    "num_samples" -> JInt(b.numSamples), "executors_asked" -> JInt(b.executorsAsked),
    "executors_answered" -> JInt(b.executorsAnswered),
    "tasks" -> JArray(b.tasks.map { t =>
      JObject("executor_id" -> JString(t.executorId), "partition_id" -> JInt(t.sample.key.partitionId),
        "task_attempt_id" -> JLong(t.sample.key.taskAttemptId), "blocked" -> JInt(t.sample.blocked),
        "samples" -> JInt(t.sample.total), "backpressure_ratio" -> num(t.ratio),
        "backpressure_level" -> JString(t.level.name))
    }.toList))

  def long(v: Long): JValue = JLong(v)

  /**
   * A stage's figures as the tab shows them (live, and replayed from the event log by the History
   * Server): the same keys in both.
   */
  def stageMetrics(m: SparkListenerSluiceStageMetrics): JObject = JObject(
    "stage_id" -> JInt(m.stageId), "stage_attempt_id" -> JInt(m.stageAttemptId), "stage_name" -> JString(m.name),
    "status" -> JString(m.status), "num_tasks" -> JInt(m.numTasks), "reported_tasks" -> JInt(m.reportedTasks),
    "running_tasks" -> JInt(m.runningTasks),
    MetricNames.NumRecordsOut -> JLong(m.numRecordsOut), MetricNames.NumRecordsIn -> JLong(m.numRecordsIn),
    MetricNames.NumBytesOut -> JLong(m.numBytesOut), MetricNames.NumBytesIn -> JLong(m.numBytesIn),
    MetricNames.NumBytesInLocal -> JLong(m.numBytesInLocal),
    MetricNames.NumBytesInRemote -> JLong(m.numBytesInRemote), MetricNames.NumBuffersOut -> JLong(m.numBuffersOut),
    MetricNames.NumBuffersInLocal -> JLong(m.numBuffersInLocal),
    MetricNames.NumBuffersInRemote -> JLong(m.numBuffersInRemote),
    MetricNames.OutPoolUsage -> num(m.outPoolUsage), MetricNames.InPoolUsage -> num(m.inPoolUsage),
    MetricNames.FloatingBuffersUsage -> num(m.floatingBuffersUsage),
    MetricNames.ExclusiveBuffersUsage -> num(m.exclusiveBuffersUsage),
    MetricNames.BackPressuredTimeMsPerSecond -> num(m.backPressuredTimeMsPerSecond),
    "backpressure_ratio" -> num(m.ratio), "backpressure_level" -> JString(m.level),
    "sampled_tasks" -> JInt(m.sampledTasks), "cause" -> JString(m.cause), "buffer_fill_rate" -> opt(m.bufferFillRateOption),
    "suggested_buffer_timeout_ms" -> opt(m.suggestedBufferTimeoutMsOption), "timestamp_ms" -> JLong(m.timestampMs),
    "job_ids" -> JArray(m.jobIdList.map(JInt(_)).toList), "job_group" -> str(m.jobGroup),
    "sql_execution_id" -> (if (m.sqlExecutionId >= 0) JLong(m.sqlExecutionId) else JNull),
    "batch" -> (if (m.batch) batch(m) else JNull))

  /** The figures a batch stage's diagnosis read (null names: none stands out); its sentence is the stage's `cause`. */
  def batch(m: SparkListenerSluiceStageMetrics): JObject = JObject(
    "tasks" -> JInt(m.batchTasks), "executor_run_time_ms" -> JLong(m.executorRunTimeMs),
    "fetch_wait_ms" -> JLong(m.fetchWaitMs), "buffer_wait_ms" -> JLong(m.bufferWaitMs),
    "spill_bytes" -> JLong(m.spillBytes),
    "max_partition_id" -> (if (m.maxPartitionId >= 0) JInt(m.maxPartitionId) else JNull),
    "max_partition_bytes" -> JLong(m.maxPartitionBytes), "median_partition_bytes" -> JLong(m.medianPartitionBytes),
    "slow_peer" -> str(m.slowProducer), "slow_peer_wait_ms" -> JLong(m.slowProducerWaitMs),
    "slow_executor" -> str(m.slowExecutor), "slow_executor_ratio" -> num(m.slowExecutorRatio))

  /** A string, null when empty (or absent from an older event log). */
  private def str(v: String): JValue = if (v == null || v.isEmpty) JNull else JString(v)

  /** [[stageMetrics]] and what only the running application knows: parents, the sample, sampling. */
  def stage(v: StageView): JValue = {
    val figures = stageMetrics(SparkListenerSluiceStageMetrics.of(v, System.currentTimeMillis()))
    JObject(figures.obj ++ List(
      "parent_ids" -> JArray(v.meta.map(_.parentIds).getOrElse(Nil).map(JInt(_)).toList),
      "backpressure" -> v.backPressure.map(backPressure).getOrElse(JNull), "sampling" -> JBool(v.sampling)))
  }

  /** An executor's network memory (the keys of [[executor]] that the event log keeps). */
  def executorMemory(e: SluiceExecutorMemory): JObject = JObject(
    "executor_id" -> JString(e.executorId), "last_report_ms" -> JLong(e.lastReportMs),
    "segment_size" -> JInt(e.segmentSize),
    MetricNames.TotalMemorySegments -> JInt(e.totalMemorySegments),
    MetricNames.AvailableMemorySegments -> JInt(e.availableMemorySegments),
    MetricNames.UsedMemorySegments -> JInt(e.usedMemorySegments))

  def executor(e: ExecutorEntry): JValue = JObject(executorMemory(SluiceExecutorMemory.of(e)).obj ++ List(
    "server_port" -> JInt(e.transport.serverPort), "server_connections" -> JInt(e.transport.serverConnections),
    "client_connections" -> JInt(e.transport.clientConnections),
    "client_connections_opened" -> JLong(e.transport.clientConnectionsOpened),
    MetricNames.IndexBytesRead -> JLong(e.totals.getOrElse(MetricNames.IndexBytesRead, 0L)),
    MetricNames.IndexBytesNeeded -> JLong(e.totals.getOrElse(MetricNames.IndexBytesNeeded, 0L))) ++
    e.transport.reads.values.map { case (name, v) => name -> JLong(v) })

  /**
   * The node shuffle services, a block of its own: `services`, each with the application's map
   * outputs it serves (in all and per shuffle) and its figures from its last status (null before
   * the first), and `executors`, whose map outputs one serves.
   */
  def nodeServices(v: NodeServicesView): JObject = {
    def figures(s: Option[NodeServiceStatus]): List[(String, JValue)] = {
      def f(get: NodeServiceStatus => Long): JValue = s.map(x => JLong(get(x)): JValue).getOrElse(JNull)
      List("registered_applications" -> f(_.registeredApplications), "registered_executors" -> f(_.registeredExecutors),
        "connections" -> f(_.connections), "readers" -> f(_.readers), "bytes_sent" -> f(_.bytesSent),
        "queued_reads" -> f(_.queuedReads), "disk_files" -> f(_.diskFiles), "disk_bytes" -> f(_.diskBytes),
        "application_executors" -> s.map(x => JArray(x.applicationExecutors.map(JString(_)).toList): JValue).getOrElse(JNull),
        "application_disk_files" -> f(_.applicationDiskFiles), "application_disk_bytes" -> f(_.applicationDiskBytes))
    }
    JObject(
      "services" -> JArray(v.services.map { s =>
        JObject(List("host" -> JString(s.host), "port" -> JInt(s.port),
          "status_at_ms" -> s.statusAtMs.map(JLong(_): JValue).getOrElse(JNull),
          "map_outputs" -> JInt(s.mapOutputs.values.sum),
          "shuffles" -> JArray(s.mapOutputs.toList.sorted.map { case (id, n) =>
            JObject("shuffle_id" -> JInt(id), "map_outputs" -> JInt(n))
          })) ++ figures(s.status))
      }.toList),
      "executors" -> JArray(v.executors.map { e =>
        JObject("executor_id" -> JString(e.executorId), "host" -> JString(e.host), "port" -> JInt(e.port),
          "live" -> JBool(e.live))
      }.toList))
  }

  /** Everything the driver holds. */
  def all(m: SluiceDriverMetrics, services: => NodeServicesView = NodeServicesView.empty): JValue = JObject(
    "report_interval_ms" -> JLong(m.reportIntervalMs),
    "executors" -> JArray(m.store.executorEntries.map(executor).toList),
    "stages" -> JArray(m.stageViews.map(stage).toList),
    "tasks" -> JArray(m.store.taskEntries.sortBy(e => (e.key.stageId, e.key.partitionId, e.key.taskAttemptId))
        .map(task).toList),
    "node_services" -> nodeServices(services))

  /** The application's summary, posted when it ends ([[SparkListenerSluiceApplicationSummary]]). */
  def summary(s: SparkListenerSluiceApplicationSummary): JObject = JObject(
    "line" -> JString(s.line), "stages" -> JInt(s.stages), "bytes_shuffled" -> JLong(s.bytesShuffled),
    "bytes_remote" -> JLong(s.bytesRemote), "fetch_wait_ms" -> JLong(s.fetchWaitMs),
    "buffer_wait_ms" -> JLong(s.bufferWaitMs),
    "slowest_stage_id" -> (if (s.slowestStageId >= 0) JInt(s.slowestStageId) else JNull),
    "slowest_stage_name" -> str(s.slowestStageName), "slowest_stage_ms" -> JLong(s.slowestStageMs),
    "slowest_stage_cause" -> str(s.slowestStageCause), "timestamp_ms" -> JLong(s.timestampMs))

  def stages(views: Seq[StageView]): JValue = JObject("stages" -> JArray(views.map(stage).toList))

  val empty: JValue = JObject("report_interval_ms" -> JLong(0), "executors" -> JArray(Nil),
    "stages" -> JArray(Nil), "tasks" -> JArray(Nil), "node_services" -> nodeServices(NodeServicesView.empty))

  def render(v: JValue): String = JsonMethods.compact(JsonMethods.render(v))
}
