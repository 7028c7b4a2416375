package org.apache.spark.shuffle.sluice.ui

import org.apache.spark.shuffle.sluice.SluiceDriverMetrics
import org.apache.spark.ui.{SparkUI, SparkUITab}

/**
 * The "Sluice" tab of Spark's UI at `/sluice/` (the page) and `/sluice/json` (the same data as
 * JSON), like Flink's web UI pages for a job's network metrics and backpressure. Private Spark
 * UI API, hence its package.
 */
private[sluice] final class SluiceTab(ui: SparkUI, val metrics: SluiceDriverMetrics)
  extends SparkUITab(ui, SluiceTab.Prefix) {

  override val name: String = "Sluice"

  attachPage(new SluicePage(this))
}

private[sluice] object SluiceTab {
  val Prefix = "sluice"

  def attach(ui: SparkUI, metrics: SluiceDriverMetrics): SluiceTab = {
    val tab = new SluiceTab(ui, metrics)
    ui.attachTab(tab)
    tab
  }
}
