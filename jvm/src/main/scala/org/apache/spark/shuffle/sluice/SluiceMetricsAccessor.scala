package org.apache.spark.shuffle.sluice

import scala.util.control.NonFatal

import org.apache.spark.shuffle.sluice.metrics.{NodeServicesView, SluiceDriverMetrics, SluiceJson}
import org.json4s.{JNull, JObject, JString}

/**
 * What Python's `sluice.metrics` and `sluice.backpressure` call through py4j on the driver: plain
 * JSON strings, so no live JVM object reaches Python. Works from py4j because it reaches nothing
 * but Sluice's own driver state (py4j cannot call SparkEnv.get). Thread-safe.
 */
object SluiceMetricsAccessor {

  private def noPlugin: String = SluiceJson.render(JObject("error" -> JString(
      "Sluice's plugin is not running in this driver: start the session with sluice.configure(...) " +
        s"(spark.plugins must list ${classOf[SluicePlugin].getName})")))

  /**
   * Every executor's, stage's and task's metrics as JSON. With `waitForReports`, first waits
   * (about two report intervals) until the executors reported everything done before the call.
   */
  def metricsJson(waitForReports: Boolean): String = SluiceDriverMetrics.get match {
    case None => noPlugin
    case Some(m) =>
      if (waitForReports) m.awaitFreshReports(3 * m.reportIntervalMs + 2000L)
      SluiceJson.render(SluiceJson.all(m, NodeServicesView.current(m)))
  }

  /**
   * The backpressure of one stage (`stageId` >= 0) or of every known stage (-1) as JSON: running
   * stages are sampled first (bounded by the sampling time plus a few report intervals).
   */
  def backpressureJson(stageId: Int): String = SluiceDriverMetrics.get match {
    case None => noPlugin
    case Some(m) =>
      try {
        val ids = if (stageId >= 0) Seq(stageId) else Nil
        SluiceJson.render(SluiceJson.stages(m.backPressure(ids, m.backPressureTimeoutMs)))
      } catch {
        case NonFatal(e) => SluiceJson.render(JObject("error" -> JString(s"backpressure failed: $e"), "stages" -> JNull))
      }
  }
}
