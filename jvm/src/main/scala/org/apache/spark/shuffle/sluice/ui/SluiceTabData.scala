package org.apache.spark.shuffle.sluice.ui

import scala.jdk.CollectionConverters._

import io.sluice.config.SluiceOptions
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.shuffle.sluice.metrics.{NodeServicesView, SluiceDriverMetrics, SluiceJson}
import org.apache.spark.shuffle.sluice.{
  SluiceExecutorMemory, SparkListenerSluiceApplicationSummary, SparkListenerSluiceSettings, SparkListenerSluiceStageMetrics
}
import org.apache.spark.status.KVUtils.KVIndexParam
import org.apache.spark.util.kvstore.KVStore
import org.json4s.{JArray, JBool, JObject, JValue}

/**
 * What the Sluice tab's page ([[SluicePage]]) shows, from either source: the running
 * application's driver ([[LiveTabData]]) or the History Server's replay of its event log
 * ([[ReplayedTabData]]). Per stage the figures of [[SparkListenerSluiceStageMetrics]], per
 * executor its network memory; task details, sampling and the node shuffle services exist only
 * while the application runs.
 * Implementations only read (the driver's thread-safe metrics, or the status store): thread-safe.
 */
private[sluice] trait SluiceTabData {
  def settings: Option[SparkListenerSluiceSettings]

  /** Newest stage first. */
  def stages: Seq[SparkListenerSluiceStageMetrics]
  def executors: Seq[SluiceExecutorMemory]

  /** The application's one-line summary, once it ended (the History Server's replay). */
  def summary: Option[SparkListenerSluiceApplicationSummary]

  /** The running application's metrics, None in the History Server. */
  def live: Option[SluiceDriverMetrics]

  /** The node shuffle services and whom they serve: the running application's only (not in the event log). */
  def nodeServices: Option[NodeServicesView]
  def json: JValue
}

/** The tab of a running application: everything is computed from the driver's metrics when shown. */
private[sluice] final class LiveTabData(metrics: SluiceDriverMetrics) extends SluiceTabData {
  override def settings: Option[SparkListenerSluiceSettings] = Some(SparkListenerSluiceSettings(
      metrics.reportIntervalMs, metrics.conf.get(SluiceOptions.BufferTimeout), metrics.conf.segmentSize,
      metrics.conf.get(SluiceOptions.BackpressureNumSamples), metrics.conf.get(SluiceOptions.BackpressureDelay)))

  override def stages: Seq[SparkListenerSluiceStageMetrics] = {
    val now = System.currentTimeMillis()
    metrics.stageViews.map(SparkListenerSluiceStageMetrics.of(_, now))
  }

  override def executors: Seq[SluiceExecutorMemory] = metrics.store.executorEntries.map(SluiceExecutorMemory.of)
  override def summary: Option[SparkListenerSluiceApplicationSummary] = None
  override def live: Option[SluiceDriverMetrics] = Some(metrics)
  override def nodeServices: Option[NodeServicesView] = Some(NodeServicesView.current(metrics))
  override def json: JValue = SluiceJson.all(metrics, NodeServicesView.current(metrics))
}

/**
 * The tab of a finished (or abandoned) application in the History Server: the last figures the
 * replayed event log holds, which [[SluiceHistoryListener]] wrote into the UI's status store.
 */
private[sluice] final class ReplayedTabData(store: KVStore) extends SluiceTabData {
  override def settings: Option[SparkListenerSluiceSettings] =
    SparkInternals.storedEntries(store, classOf[SluiceSettingsEntry]).headOption.map(_.settings)

  override def stages: Seq[SparkListenerSluiceStageMetrics] =
    SparkInternals.storedEntries(store, classOf[SluiceStageEntry]).map(_.metrics).toSeq.sortBy(-_.stageId)

  override def executors: Seq[SluiceExecutorMemory] =
    SparkInternals.storedEntries(store, classOf[SluiceExecutorMemoryEntry]).map(_.memory).toSeq.sortBy(_.executorId)

  override def summary: Option[SparkListenerSluiceApplicationSummary] =
    SparkInternals.storedEntries(store, classOf[SluiceSummaryEntry]).headOption.map(_.summary)

  override def live: Option[SluiceDriverMetrics] = None

  override def nodeServices: Option[NodeServicesView] = None

  override def json: JValue = JObject(List(
    "replayed" -> JBool(true),
    "report_interval_ms" -> settings.map(s => SluiceJson.long(s.reportIntervalMs)).getOrElse(SluiceJson.long(0)),
    "executors" -> JArray(executors.map(SluiceJson.executorMemory).toList),
    "stages" -> JArray(stages.map(SluiceJson.stageMetrics).toList)) ++
    summary.map(s => "summary" -> SluiceJson.summary(s)).toList)
}

/** A stage's last replayed figures in the History Server's status store, keyed by stage id. */
private[sluice] final class SluiceStageEntry(@KVIndexParam val stageId: Int, val metrics: SparkListenerSluiceStageMetrics)

/** The application's summary in the History Server's status store (one entry). */
private[sluice] final class SluiceSummaryEntry(
    @KVIndexParam val key: String,
    val summary: SparkListenerSluiceApplicationSummary)

/** The application's Sluice settings in the History Server's status store (one entry). */
private[sluice] final class SluiceSettingsEntry(
    @KVIndexParam val key: String,
    val settings: SparkListenerSluiceSettings)

/**
 * An executor's last replayed network memory in the History Server's status store, keyed by
 * executor id: executors that left before the application ended (the last events no longer list
 * them) keep their last figures.
 */
private[sluice] final class SluiceExecutorMemoryEntry(@KVIndexParam val executorId: String, val memory: SluiceExecutorMemory)

private[sluice] object SluiceTabData {
  val SingletonKey = "sluice"
}
