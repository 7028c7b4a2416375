package org.apache.spark.shuffle.sluice.metrics

import scala.collection.mutable

import io.sluice.metrics.MetricStore
import org.apache.spark.scheduler.{
  SparkListener, SparkListenerExecutorRemoved, SparkListenerStageCompleted, SparkListenerStageSubmitted
}

/** What the driver knows of a stage from Spark's scheduler. Immutable. */
private[sluice] final case class StageMeta(
    stageId: Int,
    attemptId: Int,
    name: String,
    numTasks: Int,
    parentIds: Seq[Int],
    status: String) {
  def isActive: Boolean = status == StageMeta.Active
}

private[sluice] object StageMeta {
  val Active = "active"
  val Complete = "complete"
  val Failed = "failed"
}

/**
 * Follows Spark's scheduler events on the driver's listener bus: each stage's name, size, status
 * and parent stages (the upstream stages whose shuffle output it reads, which the root-cause
 * analysis compares it with), and executors leaving (their running tasks end in the
 * [[MetricStore]]). Keeps the last `maxStages` stages. Thread-safe.
 */
private[sluice] final class SluiceStageListener(store: MetricStore, maxStages: Int = 1000) extends SparkListener {

  private val stages = mutable.LinkedHashMap.empty[Int, StageMeta]

  override def onStageSubmitted(event: SparkListenerStageSubmitted): Unit = {
    val i = event.stageInfo
    put(StageMeta(i.stageId, i.attemptNumber(), i.name, i.numTasks, i.parentIds, StageMeta.Active))
  }

  override def onStageCompleted(event: SparkListenerStageCompleted): Unit = {
    val i = event.stageInfo
    val status = if (i.failureReason.isDefined) StageMeta.Failed else StageMeta.Complete
    put(StageMeta(i.stageId, i.attemptNumber(), i.name, i.numTasks, i.parentIds, status))
  }

  override def onExecutorRemoved(event: SparkListenerExecutorRemoved): Unit = store.removeExecutor(event.executorId)

  private def put(meta: StageMeta): Unit = synchronized {
    stages.remove(meta.stageId)
    stages(meta.stageId) = meta
    while (stages.size > maxStages) stages.remove(stages.head._1)
  }

  def stage(stageId: Int): Option[StageMeta] = synchronized(stages.get(stageId))

  def all: Seq[StageMeta] = synchronized(stages.values.toSeq)

  def activeStageIds: Seq[Int] = synchronized(stages.values.filter(_.isActive).map(_.stageId).toSeq)
}
