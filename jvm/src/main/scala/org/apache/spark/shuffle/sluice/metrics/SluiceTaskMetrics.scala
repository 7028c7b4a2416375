package org.apache.spark.shuffle.sluice.metrics

import scala.util.control.NonFatal

import io.sluice.ShuffleEnvironment
import io.sluice.config.{ConfigOption, SluiceOptions}
import io.sluice.metrics.{LatencyGranularity, LatencyStats, TaskIOMetricGroup, TaskKey}
import org.apache.spark.TaskContext
import org.apache.spark.internal.Logging

/**
 * How the Spark boundary ties Sluice's metric groups to Spark tasks: one group per task attempt,
 * keyed by its TaskContext, created by the first writer or reader of the task and finished by a
 * task-completion listener (success, failure or kill alike), which run on the task's thread: the
 * group counts that thread's waits for network buffers meanwhile. Latency-tracking settings may be
 * overridden per job with local properties of the same keys
 * (`sc.setLocalProperty("spark.sluice.latencyTracking.interval", "100ms")`).
 *
 * Metrics never fail a task: any error here is logged and the task runs without metrics.
 */
private[sluice] object SluiceTaskMetrics extends Logging {

  def key(context: TaskContext): TaskKey =
    TaskKey(context.stageId(), context.stageAttemptNumber(), context.partitionId(), context.taskAttemptId())

  /** The metric group of `context`'s task, created (with its completion listener) on first use. */
  def group(env: ShuffleEnvironment, context: TaskContext): Option[TaskIOMetricGroup] =
    try {
      val k = key(context)
      env.metrics.liveGroup(k).orElse {
        val g = env.metrics.group(k)
        g.bindBufferWaits()
        context.addTaskCompletionListener[Unit] { _ =>
          g.unbindBufferWaits()
          try env.metrics.finish(k)
          catch { case NonFatal(e) => logWarning(s"Could not finish the metrics of $k", e) }
        }
        Some(g)
      }
    } catch {
      case NonFatal(e) =>
        logWarning(s"Sluice metrics are off for task ${context.taskAttemptId()}: ${e.getMessage}", e)
        None
    }

  /** The latency-marker interval of this task in ms (0: tracking off). */
  def latencyInterval(env: ShuffleEnvironment, context: TaskContext): Long =
    setting(env, context, SluiceOptions.LatencyTrackingInterval)

  /** The task's latency histograms, created when latency tracking is on for it; else None. */
  def latencyStats(env: ShuffleEnvironment, context: TaskContext, group: Option[TaskIOMetricGroup]): Option[LatencyStats] =
    group.flatMap { g =>
      if (latencyInterval(env, context) <= 0) None
      else
        try {
          val granularity = LatencyGranularity.parse(setting(env, context, SluiceOptions.LatencyTrackingGranularity))
          Some(env.metrics.enableLatencyTracking(g, granularity))
        } catch {
          case NonFatal(e) => logWarning(s"Latency tracking is off for ${g.key}: ${e.getMessage}", e); None
        }
    }

  /** A setting from the task's local properties if set there (and valid), else the executor's. */
  private def setting[T](env: ShuffleEnvironment, context: TaskContext, option: ConfigOption[T]): T = {
    val local = Option(context.getLocalProperty(option.key))
    local.flatMap { raw =>
      try Some(option.parse(raw))
      catch {
        case NonFatal(e) => logWarning(s"Ignoring the job's ${option.key}: ${e.getMessage}"); None
      }
    }.getOrElse(env.conf.get(option))
  }
}
