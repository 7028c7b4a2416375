package org.apache.spark.shuffle.sluice.service

import io.sluice.service.ServiceMetrics
import org.apache.hadoop.metrics2.{MetricsCollector, MetricsSource}
import org.apache.hadoop.metrics2.lib.{DefaultMetricsSystem, Interns}

/**
 * The YARN auxiliary service's metrics as a source of the NodeManager's Hadoop metrics2 system
 * (Spark's `YarnShuffleServiceMetrics` is the counterpart): one record,
 * [[ServiceMetrics.SourceName]], with every metric of [[ServiceMetrics.Metrics]], so they appear in
 * the NodeManager's JMX (`Hadoop:service=NodeManager,name=sluiceShuffleService`) and its metrics2
 * sinks. Called on the metrics system's threads; thread-safe.
 */
final class YarnServiceMetrics(metrics: ServiceMetrics) extends MetricsSource {

  override def getMetrics(collector: MetricsCollector, all: Boolean): Unit = {
    val figures = metrics.current
    val record = collector.addRecord(YarnServiceMetrics.Record)
    ServiceMetrics.Metrics.foreach { m =>
      val info = Interns.info(m.name, m.description)
      if (m.counter) record.addCounter(info, m.value(figures)) else record.addGauge(info, m.value(figures))
    }
  }
}

object YarnServiceMetrics {

  private val Record = Interns.info(ServiceMetrics.SourceName, "Sluice's node shuffle service")

  /** Registers `source` with the NodeManager's metrics system (its DefaultMetricsSystem). */
  def register(source: YarnServiceMetrics): Unit =
    DefaultMetricsSystem.instance().register(ServiceMetrics.SourceName, Record.description(), source)

  /** Removes the source again (the service stops). */
  def unregister(): Unit = DefaultMetricsSystem.instance().unregisterSource(ServiceMetrics.SourceName)
}
