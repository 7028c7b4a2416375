package org.apache.spark.shuffle.sluice.metrics

import scala.collection.mutable

import io.sluice.config.SluiceOptions
import org.apache.spark.internal.Logging
import org.apache.spark.scheduler.{SparkListener, SparkListenerApplicationEnd, SparkListenerEvent, SparkListenerStageCompleted}
import org.apache.spark.shuffle.sluice.{
  SluiceExecutorMemory, SparkListenerSluiceApplicationSummary, SparkListenerSluiceNetworkMemory, SparkListenerSluiceSettings,
  SparkListenerSluiceStageMetrics
}

/**
 * Puts the Sluice tab's figures into Spark's event log as Sluice's listener events
 * ([[SparkListenerSluiceStageMetrics]], [[SparkListenerSluiceNetworkMemory]]), so that the History
 * Server can replay the tab. A stage's figures are posted when they change, but a running stage's
 * at most once per `minIntervalMs`; a finished stage's at once (its tasks' last reports arrive
 * after Spark ends the stage, and a log cut short by a killed driver must still hold them); and
 * everything changed since the last post when a stage ends and when the application ends
 * (Celeborn's review of CELEBORN-2415 notes that throttled writes need that final flush). The
 * executors' network memory follows the same rule. Called from the executors' report handler and
 * the listener bus; thread-safe. When the application ends it also posts and logs its one-line
 * summary ([[SparkListenerSluiceApplicationSummary]]).
 */
private[sluice] final class SluiceEventPublisher(
    metrics: SluiceDriverMetrics,
    post: SparkListenerEvent => Unit,
    minIntervalMs: Long = SluiceEventPublisher.MinIntervalMs,
    clock: () => Long = () => System.currentTimeMillis())
  extends SparkListener with Logging {

  private val lastStage = mutable.Map.empty[Int, (SparkListenerSluiceStageMetrics, Long)] // guarded by this
  private var lastMemory: Option[(SparkListenerSluiceNetworkMemory, Long)] = None // guarded by this
  private var ended = false // guarded by this: the application summary was posted

  /** The settings the tab's header shows; once, at start. */
  def postSettings(): Unit = {
    val c = metrics.conf
    post(SparkListenerSluiceSettings(metrics.reportIntervalMs, c.get(SluiceOptions.BufferTimeout), c.segmentSize,
        c.get(SluiceOptions.BackpressureNumSamples), c.get(SluiceOptions.BackpressureDelay)))
  }

  /** After an executor's report about the tasks of `stageIds` (and samples of them). */
  def onReport(stageIds: Iterable[Int]): Unit = synchronized {
    if (!ended) {
      stageIds.foreach(publishStage(_, force = false))
      publishMemory(force = false)
    }
  }

  override def onStageCompleted(event: SparkListenerStageCompleted): Unit = synchronized {
    publishStage(event.stageInfo.stageId, force = true)
    publishMemory(force = true)
  }

  /** Flushes, then posts and logs the application's one-line summary. */
  override def onApplicationEnd(event: SparkListenerApplicationEnd): Unit = synchronized {
    flush()
    val summary = SparkListenerSluiceApplicationSummary.of(metrics, clock())
    post(summary)
    // The summary is the application's last Sluice event: a report arriving later posts nothing.
    ended = true
    logInfo(summary.line)
  }

  /** Posts every stage's and the executors' figures that changed since they were last posted. */
  def flush(): Unit = synchronized {
    metrics.stageIds.foreach(publishStage(_, force = true))
    publishMemory(force = true)
  }

  private def publishStage(stageId: Int, force: Boolean): Unit =
    if (metrics.store.tasksOf(stageId).nonEmpty) {
      val now = clock()
      val figures = SparkListenerSluiceStageMetrics.of(metrics.stageView(stageId), now)
      val due = lastStage.get(stageId) match {
        case None => true
        case Some((last, at)) =>
          !figures.sameFiguresAs(last) && (force || !metrics.isRunning(stageId) || now - at >= minIntervalMs)
      }
      if (due) {
        post(figures)
        lastStage(stageId) = (figures, now)
      }
    }

  private def publishMemory(force: Boolean): Unit = {
    val now = clock()
    val memory = SparkListenerSluiceNetworkMemory(metrics.store.executorEntries.map(SluiceExecutorMemory.of), now)
    val due = memory.executors.nonEmpty && (lastMemory match {
      case None => true
      case Some((last, at)) => !memory.sameFiguresAs(last) && (force || now - at >= minIntervalMs)
    })
    if (due) {
      post(memory)
      lastMemory = Some((memory, now))
    }
  }
}

private[sluice] object SluiceEventPublisher {

  /** The least time between two posts of a running stage's figures (or of the executors'). */
  val MinIntervalMs: Long = 10000L
}
