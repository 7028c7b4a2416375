package org.apache.spark.shuffle.sluice.metrics

import scala.collection.mutable

import io.sluice.metrics.MetricStore
import org.apache.spark.Success
import org.apache.spark.scheduler.{
  SparkListener, SparkListenerExecutorRemoved, SparkListenerJobStart, SparkListenerStageCompleted, SparkListenerStageSubmitted,
  SparkListenerTaskEnd
}

/** What the driver knows of a stage from Spark's scheduler. Immutable. */
private[sluice] final case class StageMeta(
    stageId: Int,
    attemptId: Int,
    name: String,
    numTasks: Int,
    parentIds: Seq[Int],
    status: String,
    jobIds: Seq[Int] = Nil,
    jobGroup: String = "",
    sqlExecutionId: Long = -1L,
    submittedMs: Long = -1L,
    completedMs: Long = -1L) {
  def isActive: Boolean = status == StageMeta.Active

  /** Wall time from submission to completion, once the stage completed. */
  def durationMs: Option[Long] = if (submittedMs >= 0 && completedMs >= submittedMs) Some(completedMs - submittedMs) else None
}

private[sluice] object StageMeta {
  val Active = "active"
  val Complete = "complete"
  val Failed = "failed"
}

/**
 * Spark's task metrics of one successful task attempt, as the batch diagnosis and the
 * application's summary read them: run time, fetch wait, shuffle bytes (all and remote) and
 * records read, shuffle bytes written, and spill. They arrive with the task's end, so they are
 * complete when the job ends, unlike Sluice's periodic executor reports. Immutable.
 */
private[sluice] final case class SparkTaskFigures(
    taskAttemptId: Long,
    stageAttemptId: Int,
    partitionId: Int,
    executorId: String,
    executorRunTimeMs: Long,
    fetchWaitMs: Long,
    shuffleBytesRead: Long,
    shuffleRecordsRead: Long,
    spillBytes: Long,
    shuffleRemoteBytesRead: Long = 0L,
    shuffleBytesWritten: Long = 0L) {

  /** The task read or wrote shuffle data. */
  def shuffled: Boolean = shuffleBytesRead > 0 || shuffleBytesWritten > 0
}

/**
 * Follows Spark's scheduler events on the driver's listener bus: each stage's name, size, status,
 * parent stages (the upstream stages whose shuffle output it reads, which the root-cause analysis
 * compares it with), jobs, job group and SQL execution; each successful task's Spark metrics (the
 * batch diagnosis reads them); and executors leaving (their running tasks end in the
 * [[MetricStore]]). Keeps the last `maxStages` stages. Thread-safe.
 */
private[sluice] final class SluiceStageListener(store: MetricStore, maxStages: Int = 1000) extends SparkListener {

  private val stages = mutable.LinkedHashMap.empty[Int, StageMeta] // guarded by this
  private val jobsOfStage = mutable.LinkedHashMap.empty[Int, Seq[Int]] // guarded by this
  private val taskFigures = mutable.LinkedHashMap.empty[Int, mutable.Map[Int, SparkTaskFigures]] // guarded by this

  override def onJobStart(event: SparkListenerJobStart): Unit = synchronized {
    event.stageIds.foreach { s =>
      jobsOfStage(s) = (jobsOfStage.getOrElse(s, Nil) :+ event.jobId).distinct
      stages.get(s).foreach(m => stages(s) = m.copy(jobIds = jobsOfStage(s)))
    }
    while (jobsOfStage.size > maxStages) jobsOfStage.remove(jobsOfStage.head._1)
  }

  override def onStageSubmitted(event: SparkListenerStageSubmitted): Unit = {
    val i = event.stageInfo
    val props = Option(event.properties)
    val group = props.flatMap(p => Option(p.getProperty("spark.jobGroup.id"))).getOrElse("")
    val sql = props.flatMap(p => Option(p.getProperty("spark.sql.execution.id"))).flatMap(_.toLongOption).getOrElse(-1L)
    put(StageMeta(i.stageId, i.attemptNumber(), i.name, i.numTasks, i.parentIds, StageMeta.Active, Nil, group, sql,
        i.submissionTime.getOrElse(-1L)))
  }

  override def onStageCompleted(event: SparkListenerStageCompleted): Unit = {
    val i = event.stageInfo
    val status = if (i.failureReason.isDefined) StageMeta.Failed else StageMeta.Complete
    val known = stage(i.stageId)
    put(StageMeta(i.stageId, i.attemptNumber(), i.name, i.numTasks, i.parentIds, status, Nil,
        known.fold("")(_.jobGroup), known.fold(-1L)(_.sqlExecutionId),
        i.submissionTime.orElse(known.map(_.submittedMs)).getOrElse(-1L), i.completionTime.getOrElse(-1L)))
  }

  /** Keeps a successful task's Spark metrics (one per partition: the latest attempt's). */
  override def onTaskEnd(event: SparkListenerTaskEnd): Unit = if (event.reason == Success && event.taskMetrics != null) {
    val m = event.taskMetrics
    val info = event.taskInfo
    val read = m.shuffleReadMetrics
    val figures = SparkTaskFigures(info.taskId, event.stageAttemptId, info.partitionId, info.executorId,
      m.executorRunTime, read.fetchWaitTime, read.totalBytesRead, read.recordsRead,
      m.memoryBytesSpilled + m.diskBytesSpilled, read.remoteBytesRead, m.shuffleWriteMetrics.bytesWritten)
    synchronized {
      val tasks = taskFigures.getOrElseUpdate(event.stageId, mutable.Map.empty)
      if (tasks.get(info.partitionId).forall(_.stageAttemptId <= event.stageAttemptId)) tasks(info.partitionId) = figures
      while (taskFigures.size > maxStages) taskFigures.remove(taskFigures.head._1)
    }
  }

  override def onExecutorRemoved(event: SparkListenerExecutorRemoved): Unit = store.removeExecutor(event.executorId)

  private def put(meta: StageMeta): Unit = synchronized {
    stages.remove(meta.stageId)
    stages(meta.stageId) = meta.copy(jobIds = jobsOfStage.getOrElse(meta.stageId, Nil))
    while (stages.size > maxStages) stages.remove(stages.head._1)
  }

  def stage(stageId: Int): Option[StageMeta] = synchronized(stages.get(stageId))

  def all: Seq[StageMeta] = synchronized(stages.values.toSeq)

  def activeStageIds: Seq[Int] = synchronized(stages.values.filter(_.isActive).map(_.stageId).toSeq)

  /** Every stage Spark reported successful tasks of (the last `maxStages`). */
  def stageIdsWithTasks: Seq[Int] = synchronized(taskFigures.keys.toSeq)

  /** Spark's metrics of the stage's successful tasks, by partition. */
  def tasksOf(stageId: Int): Seq[SparkTaskFigures] =
    synchronized(taskFigures.get(stageId).map(_.values.toSeq.sortBy(_.partitionId)).getOrElse(Nil))
}
