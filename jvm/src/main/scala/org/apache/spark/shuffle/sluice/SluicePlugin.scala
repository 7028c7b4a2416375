package org.apache.spark.shuffle.sluice

import java.util.{Collections, Map => JMap}

import scala.util.control.NonFatal

import com.codahale.metrics.MetricRegistry
import io.sluice.config.SluiceConf
import org.apache.spark.SparkContext
import org.apache.spark.api.plugin.{DriverPlugin, ExecutorPlugin, PluginContext, SparkPlugin}
import org.apache.spark.internal.Logging
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.shuffle.sluice.metrics.{SluiceDriverMetrics, SluiceEventPublisher, SluiceMetricsSource}
import org.apache.spark.shuffle.sluice.rpc.{PeerServers, ReportCodec, SluiceMessages}
import org.apache.spark.shuffle.sluice.ui.SluiceTab

/**
 * Sluice's Spark plugin (`spark.plugins`, set by `sluice.configure`). The executor side
 * ([[SluiceExecutorPlugin]]) publishes each executor's network metrics under Flink's names in
 * Spark's metrics system, reports them to the driver and samples task threads for the
 * backpressure monitor; the driver side ([[SluiceDriverPlugin]]) keeps the reports, runs the
 * monitor, adds the Sluice tab to the UI, posts the tab's figures as listener events for the
 * event log and the History Server ([[SluiceEventPublisher]]) and answers Python.
 */
class SluicePlugin extends SparkPlugin {
  override def driverPlugin(): DriverPlugin = new SluiceDriverPlugin
  override def executorPlugin(): ExecutorPlugin = new SluiceExecutorPlugin
}

/**
 * The driver half of [[SluicePlugin]]: owns the [[SluiceDriverMetrics]], registers its stage
 * listener and the UI tab, and answers the executors' reports. On a cluster it also publishes
 * the application-wide values of the reports under Flink's names in the driver's metrics system
 * (source `sluice`, once Spark knows the application id; executors publish theirs in their own
 * JVMs); in local mode the driver JVM runs the executor, whose plugin takes the metric names, so
 * the driver registers none. Its replies name each executor the servers its readers will read
 * from: its peers' Sluice servers, or the node shuffle services that serve their map outputs
 * ([[PeerServers]]). Nothing here may fail the application: errors are logged.
 */
private[sluice] final class SluiceDriverPlugin extends DriverPlugin with Logging {

  @volatile private var metrics: SluiceDriverMetrics = _
  @volatile private var publisher: SluiceEventPublisher = _
  private val registry = new MetricRegistry
  @volatile private var published: Option[SparkInternals.RegisteredSource] = None
  @volatile private var peers = new PeerServers
  @volatile private var readHostLocal = false

  override def init(sc: SparkContext, ctx: PluginContext): JMap[String, String] = {
    try {
      val conf =
        try SluiceEnvironment.sluiceConf(sc.getConf)
        catch {
          case NonFatal(e) => logWarning(s"Sluice's plugin uses default settings: ${e.getMessage}"); SluiceConf.defaults
        }
      peers = new PeerServers(pipelined =
        sc.getConf.getOption("spark.shuffle.manager.incremental").contains(classOf[SluicePipelinedShuffleManager].getName))
      readHostLocal = SluiceEnvironment.readsHostLocalDisk(sc.getConf)
      val m = new SluiceDriverMetrics(conf,
        blockingThroughSluice = sc.getConf.get("spark.shuffle.manager", "") == classOf[SluiceShuffleManager].getName)
      sc.addSparkListener(m.stages)
      val p = new SluiceEventPublisher(m, SparkInternals.postEvent(sc, _))
      sc.addSparkListener(p)
      p.postSettings()
      publisher = p
      metrics = m
      SluiceDriverMetrics.set(m)
      if (!sc.isLocal) {
        try new SluiceMetricsSource(registry, new SluiceMetricsSource.ClusterValues(m.store)).register()
        catch { case NonFatal(e) => logWarning("Could not set up Sluice's driver metrics", e) }
      }
      try SluiceTab.attach(sc, m)
      catch {
        case NonFatal(e) => logWarning("Could not add the Sluice tab to Spark's UI", e)
      }
    } catch {
      case NonFatal(e) => logWarning("Sluice's driver plugin could not start; Sluice metrics are off", e)
    }
    Collections.emptyMap()
  }

  /** Spark knows the application id now: the driver's metrics (on a cluster) can be named. */
  override def registerMetrics(appId: String, pluginContext: PluginContext): Unit =
    if (!registry.getNames.isEmpty) {
      try published = SluiceMetricsSource.publish(registry)
      catch {
        case NonFatal(e) => logWarning("Could not register Sluice's driver metrics", e)
      }
      if (published.isEmpty) logWarning("Sluice's driver metrics are not published: Spark's metrics system cannot name them")
    }

  override def receive(message: AnyRef): AnyRef = message match {
    case bytes: Array[Byte] =>
      val reply = ReportCodec.decode(bytes) match {
        case r: SluiceMessages.Report if metrics != null =>
          val m = metrics
          val reply =
            try {
              val servers = peers.announce(r.server, r.nodeService, r.snapshot.executorId, m.liveExecutors,
                r.partitionDirs)
              m.onReport(r).copy(servers = servers,
                hostLocal = if (readHostLocal) peers.hostLocal(r.snapshot.executorId) else Nil)
            } catch {
              case NonFatal(e) => logWarning("Could not answer Sluice's executor report", e); SluiceMessages.ReportReply(Nil)
            }
          val p = publisher
          if (p != null) {
            val stageIds = r.snapshot.tasks.map(_.key.stageId) ++ r.samples.map(_.stageId)
            try p.onReport(stageIds.distinct)
            catch {
              case NonFatal(e) => logWarning("Could not post Sluice's figures to the event log", e)
            }
          }
          reply
        case _: SluiceMessages.Report => SluiceMessages.ReportReply(Nil)
        case other => logDebug(s"Sluice's driver plugin ignores $other"); SluiceMessages.ReportReply(Nil)
      }
      ReportCodec.encode(reply)
    case other => logDebug(s"Sluice's driver plugin ignores $other"); null
  }

  override def shutdown(): Unit = {
    try published.foreach(_.remove())
    catch { case NonFatal(e) => logDebug("Removing Sluice's metrics", e) }
    published = None
    val m = metrics
    if (m != null) SluiceDriverMetrics.clear(m)
  }
}
