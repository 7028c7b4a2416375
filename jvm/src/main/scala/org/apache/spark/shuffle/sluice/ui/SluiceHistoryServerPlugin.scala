package org.apache.spark.shuffle.sluice.ui

import org.apache.spark.SparkConf
import org.apache.spark.scheduler.{SparkListener, SparkListenerEvent}
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.shuffle.sluice.{
  SparkListenerSluiceApplicationSummary, SparkListenerSluiceNetworkMemory, SparkListenerSluiceSettings,
  SparkListenerSluiceStageMetrics
}
import org.apache.spark.status.{AppHistoryServerPlugin, ElementTrackingStore}
import org.apache.spark.ui.SparkUI

/**
 * The Sluice tab in Spark's History Server, found through
 * `META-INF/services/org.apache.spark.status.AppHistoryServerPlugin` when Sluice's jar is on the
 * History Server's class path (as Spark SQL's `SQLHistoryServerPlugin` brings its tab): a replay
 * listener keeps Sluice's events of the event log (the application's summary included) in the UI's status store, and the tab shows them
 * with the live tab's page. Stateless; the History Server calls it per application it loads.
 */
class SluiceHistoryServerPlugin extends AppHistoryServerPlugin {

  override def createListeners(conf: SparkConf, store: ElementTrackingStore): Seq[SparkListener] =
    Seq(new SluiceHistoryListener(store))

  /** The tab only for applications that ran Sluice (their logs hold its settings event). */
  override def setupUI(ui: SparkUI): Unit = {
    val data = new ReplayedTabData(SparkInternals.uiStore(ui))
    if (data.settings.isDefined || data.stages.nonEmpty) {
      SparkInternals.attachUiTab(ui, SluiceTab.Name, SluiceTab.Prefix, new SluicePage(data))
    }
  }
}

/**
 * Replays Sluice's listener events into the History Server's status store: the last figures of
 * each stage and of each executor's network memory, and the settings. Called on the replay thread.
 */
private[sluice] final class SluiceHistoryListener(store: ElementTrackingStore) extends SparkListener {
  override def onOtherEvent(event: SparkListenerEvent): Unit = event match {
    case e: SparkListenerSluiceStageMetrics => SparkInternals.writeToStore(store, new SluiceStageEntry(e.stageId, e))
    case e: SparkListenerSluiceNetworkMemory =>
      e.executors.foreach(m => SparkInternals.writeToStore(store, new SluiceExecutorMemoryEntry(m.executorId, m)))
    case e: SparkListenerSluiceSettings =>
      SparkInternals.writeToStore(store, new SluiceSettingsEntry(SluiceTabData.SingletonKey, e))
    case e: SparkListenerSluiceApplicationSummary =>
      SparkInternals.writeToStore(store, new SluiceSummaryEntry(SluiceTabData.SingletonKey, e))
    case _ =>
  }
}
