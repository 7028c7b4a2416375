package org.apache.spark.shuffle.sluice.ui

import org.apache.spark.SparkContext
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.shuffle.sluice.metrics.SluiceDriverMetrics

/**
 * The "Sluice" tab of Spark's UI at `/sluice/` (the page) and `/sluice/json` (the same data as
 * JSON), like Flink's web UI pages for a job's network metrics and backpressure. Spark's UI API is
 * private, so the adapter ([[SparkInternals.attachUiTab]]) makes the tab; [[SluicePage]] fills it.
 */
private[sluice] object SluiceTab {
  val Name = "Sluice"
  val Prefix = "sluice"

  /** Adds the tab to `sc`'s UI; false when the UI is off. */
  def attach(sc: SparkContext, metrics: SluiceDriverMetrics): Boolean =
    SparkInternals.attachUiTab(sc, Name, Prefix, new SluicePage(new LiveTabData(metrics)))
}
