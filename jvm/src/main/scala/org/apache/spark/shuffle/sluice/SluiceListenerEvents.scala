package org.apache.spark.shuffle.sluice

import scala.collection.mutable

import io.sluice.metrics.{BatchDiagnosis, ExecutorEntry, TaskEntry}
import org.apache.spark.scheduler.SparkListenerEvent
import org.apache.spark.shuffle.sluice.metrics.{SluiceDriverMetrics, SparkTaskFigures, StageView}

/**
 * Sluice's own listener events: what the Sluice tab shows, posted on the driver's listener bus so
 * that Spark's event log keeps them and the History Server replays them into the same tab
 * ([[ui.SluiceHistoryServerPlugin]]), as Spark SQL's `SparkListenerSQL*`
 * events feed its tab. Spark writes a custom event with Jackson and instantiates it on replay by
 * its class name, so these are flat case classes of plain values whose names and fields must not
 * change (a new field needs a default, an old one stays). Optional figures are -1 when absent
 * (Jackson cannot tell an `Option[Double]` from an `Option[Int]` on replay). Immutable.
 */
final case class SparkListenerSluiceSettings(
    reportIntervalMs: Long,
    bufferTimeoutMs: Long,
    segmentSize: Int,
    backpressureNumSamples: Int,
    backpressureDelayMs: Long)
  extends SparkListenerEvent

/**
 * One stage's figures as the Sluice tab's stage table shows them, at `timestampMs`: for a batch
 * stage (`batch`) also its batch diagnosis ([[io.sluice.metrics.BatchDiagnosis]]: `batchCause`
 * and the figures it read), for a pipelined one the backpressure sentence (`rootCause`).
 */
final case class SparkListenerSluiceStageMetrics(
    stageId: Int,
    stageAttemptId: Int,
    name: String,
    status: String,
    numTasks: Int,
    reportedTasks: Int,
    runningTasks: Int,
    numRecordsOut: Long,
    numRecordsIn: Long,
    numBytesOut: Long,
    numBytesIn: Long,
    numBytesInLocal: Long,
    numBytesInRemote: Long,
    numBuffersOut: Long,
    numBuffersInLocal: Long,
    numBuffersInRemote: Long,
    outPoolUsage: Double,
    inPoolUsage: Double,
    floatingBuffersUsage: Double,
    exclusiveBuffersUsage: Double,
    backPressuredTimeMsPerSecond: Double,
    backPressureSampled: Boolean,
    ratio: Double,
    level: String,
    sampledTasks: Int,
    rootCause: String,
    bufferFillRate: Double,
    suggestedBufferTimeoutMs: Double,
    timestampMs: Long,
    jobIds: Seq[Int] = Nil,
    jobGroup: String = "",
    sqlExecutionId: Long = -1L,
    batch: Boolean = false,
    batchCause: String = "",
    batchTasks: Int = 0,
    executorRunTimeMs: Long = 0L,
    fetchWaitMs: Long = 0L,
    bufferWaitMs: Long = 0L,
    spillBytes: Long = 0L,
    maxPartitionId: Int = -1,
    maxPartitionBytes: Long = 0L,
    medianPartitionBytes: Long = 0L,
    slowProducer: String = "",
    slowProducerWaitMs: Long = 0L,
    slowExecutor: String = "",
    slowExecutorRatio: Double = 0.0)
  extends SparkListenerEvent {

  /** The job ids, empty (not null) for an event of an older log that did not have them. */
  def jobIdList: Seq[Int] = Option(jobIds).getOrElse(Nil)

  def bufferFillRateOption: Option[Double] = Some(bufferFillRate).filter(_ >= 0)
  def suggestedBufferTimeoutMsOption: Option[Double] = Some(suggestedBufferTimeoutMs).filter(_ >= 0)

  /** The stage's one diagnosis sentence: the batch diagnosis of a batch stage, the backpressure sentence otherwise. */
  def cause: String = if (batch) batchCause else rootCause

  /** The same figures regardless of when they were taken. */
  def sameFiguresAs(other: SparkListenerSluiceStageMetrics): Boolean = copy(timestampMs = 0L) == other.copy(timestampMs = 0L)
}

object SparkListenerSluiceStageMetrics {
  private def finite(v: Double): Double = if (v.isNaN || v.isInfinite) 0.0 else v

  def of(v: StageView, timestampMs: Long): SparkListenerSluiceStageMetrics = withBatch(
    SparkListenerSluiceStageMetrics(
      stageId = v.stageId, stageAttemptId = v.attemptId, name = v.name, status = v.status,
      numTasks = v.meta.fold(v.tasks.size)(_.numTasks), reportedTasks = v.tasks.size, runningTasks = v.runningTasks,
      numRecordsOut = v.numRecordsOut, numRecordsIn = v.numRecordsIn, numBytesOut = v.numBytesOut,
      numBytesIn = v.numBytesIn, numBytesInLocal = v.numBytesInLocal, numBytesInRemote = v.numBytesInRemote,
      numBuffersOut = v.numBuffersOut, numBuffersInLocal = v.numBuffersInLocal,
      numBuffersInRemote = v.numBuffersInRemote, outPoolUsage = finite(v.outPoolUsage),
      inPoolUsage = finite(v.inPoolUsage), floatingBuffersUsage = finite(v.floatingBuffersUsage),
      exclusiveBuffersUsage = finite(v.exclusiveBuffersUsage),
      backPressuredTimeMsPerSecond = finite(v.backPressuredTimeMsPerSecond),
      backPressureSampled = v.backPressure.isDefined, ratio = finite(v.ratio), level = v.level.name,
      sampledTasks = v.backPressure.fold(0)(_.tasks.size), rootCause = v.rootCause,
      bufferFillRate = v.diagnosis.bufferFillRate.map(finite).getOrElse(-1.0),
      suggestedBufferTimeoutMs = v.diagnosis.suggestedBufferTimeoutMs.map(finite).getOrElse(-1.0),
      timestampMs = timestampMs, jobIds = v.meta.fold(Seq.empty[Int])(_.jobIds),
      jobGroup = v.meta.fold("")(_.jobGroup), sqlExecutionId = v.meta.fold(-1L)(_.sqlExecutionId)), v.batch)

  private def withBatch(m: SparkListenerSluiceStageMetrics, b: Option[BatchDiagnosis.Result]) = b.fold(m)(r =>
    m.copy(
      batch = true, batchCause = r.cause, batchTasks = r.tasks, executorRunTimeMs = r.runTimeMs,
      fetchWaitMs = r.fetchWaitMs, bufferWaitMs = r.bufferWaitMs, spillBytes = r.spillBytes,
      maxPartitionId = r.maxPartitionId, maxPartitionBytes = r.maxPartitionBytes,
      medianPartitionBytes = r.medianPartitionBytes, slowProducer = r.slowProducer,
      slowProducerWaitMs = r.slowProducerWaitMs, slowExecutor = r.slowExecutor,
      slowExecutorRatio = finite(r.slowExecutorRatio)))
}

/** One executor's network memory (Flink's `*MemorySegments` gauges) at its last report. */
final case class SluiceExecutorMemory(
    executorId: String,
    totalMemorySegments: Int,
    availableMemorySegments: Int,
    usedMemorySegments: Int,
    segmentSize: Int,
    lastReportMs: Long)

object SluiceExecutorMemory {
  def of(e: ExecutorEntry): SluiceExecutorMemory = SluiceExecutorMemory(e.executorId, e.segments.total,
    e.segments.available, e.segments.used, e.segments.segmentSize, e.lastReportMillis)
}

/** Every executor's network memory, as the Sluice tab's executor table shows it, at `timestampMs`. */
final case class SparkListenerSluiceNetworkMemory(executors: Seq[SluiceExecutorMemory], timestampMs: Long)
  extends SparkListenerEvent {

  /** The same segments regardless of when they were reported. */
  def sameFiguresAs(other: SparkListenerSluiceNetworkMemory): Boolean =
    executors.map(_.copy(lastReportMs = 0L)) == other.executors.map(_.copy(lastReportMs = 0L))
}

/**
 * The application in one line, posted (and logged by the driver) when it ends: the shuffle bytes
 * Sluice moved (`bytesShuffled`: every stage's local and remote input as sent, compressed when
 * stored compressed; `bytesRemote`: the part that crossed the network), how long reduce tasks
 * waited for input (Spark's fetch wait) and for network buffers, and the slowest of the stages
 * that shuffled through Sluice (wall time from submission to completion) with its [[cause]].
 * Stages, bytes and fetch wait come from Spark's task metrics where Spark has them (they arrive
 * with each task's end, so a stage that finished just before the application ended is counted);
 * buffer wait and stages Spark has no finished task of from Sluice's executor reports.
 * `slowestStageId` is -1 when no stage shuffled through Sluice.
 */
final case class SparkListenerSluiceApplicationSummary(
    stages: Int,
    bytesShuffled: Long,
    bytesRemote: Long,
    fetchWaitMs: Long,
    bufferWaitMs: Long,
    slowestStageId: Int,
    slowestStageName: String,
    slowestStageMs: Long,
    slowestStageCause: String,
    timestampMs: Long)
  extends SparkListenerEvent {

  /** The driver log's line (also the History Server tab's). */
  def line: String = {
    def bytes(b: Long): String = if (b < (1L << 20)) f"${b / 1024.0}%.1f KiB"
    else if (b < (1L << 30)) f"${b / 1048576.0}%.1f MiB"
    else f"${b / 1073741824.0}%.2f GiB"
    def secs(ms: Long): String = f"${ms / 1000.0}%.1f s"
    val head = s"Sluice summary: ${bytes(bytesShuffled)} shuffled (${bytes(bytesRemote)} across the network) in " +
      s"$stages stage${if (stages == 1) "" else "s"}; reduce tasks waited ${secs(fetchWaitMs)} for input and " +
      s"${secs(bufferWaitMs)} for network buffers"
    if (slowestStageId < 0) s"$head."
    else s"$head; slowest stage $slowestStageId ($slowestStageName), ${secs(slowestStageMs)}: $slowestStageCause"
  }
}

object SparkListenerSluiceApplicationSummary {

  /** The summary of every stage `m` holds metrics of, at `timestampMs`. */
  def of(m: SluiceDriverMetrics, timestampMs: Long): SparkListenerSluiceApplicationSummary = {
    // Each stage's tasks, Sluice's and Spark's, are read once: a stage is also its children's parent.
    val sluiceTasks = mutable.HashMap.empty[Int, Seq[TaskEntry]]
    val sparkTasks = mutable.HashMap.empty[Int, Seq[SparkTaskFigures]]
    def sluiceOf(id: Int) = sluiceTasks.getOrElseUpdate(id, m.store.tasksOf(id))
    def sparkOf(id: Int) = sparkTasks.getOrElseUpdate(id, m.stages.tasksOf(id))
    val sparkShuffled =
      if (m.blockingThroughSluice) m.stages.stageIdsWithTasks.filter(id => sparkOf(id).exists(_.shuffled))
      else Nil
    val ids = (m.store.stageIds ++ sparkShuffled).distinct.sorted
    val views = ids.map(m.stageView(_, sluiceOf, sparkOf))
    // (all, remote) bytes read: Spark's figures when it has the stage's finished tasks, else Sluice's.
    val bytes = views.map { v =>
      val spark = sparkOf(v.stageId)
      if (spark.exists(_.shuffled)) (spark.map(_.shuffleBytesRead).sum, spark.map(_.shuffleRemoteBytesRead).sum)
      else (v.numBytesInLocal + v.numBytesInRemote, v.numBytesInRemote)
    }
    val slowest = views.flatMap(v => v.meta.flatMap(_.durationMs).map(v -> _)).maxByOption(_._2)
    SparkListenerSluiceApplicationSummary(
      stages = ids.size,
      bytesShuffled = bytes.map(_._1).sum,
      bytesRemote = bytes.map(_._2).sum,
      fetchWaitMs = ids.flatMap(sparkOf).map(_.fetchWaitMs).sum,
      bufferWaitMs = views.flatMap(_.tasks).map(_.snapshot.bufferWaitMs).sum,
      slowestStageId = slowest.fold(-1)(_._1.stageId),
      slowestStageName = slowest.fold("")(_._1.name),
      slowestStageMs = slowest.fold(0L)(_._2),
      slowestStageCause = slowest.fold("")(s => SparkListenerSluiceStageMetrics.of(s._1, timestampMs).cause),
      timestampMs = timestampMs)
  }
}
