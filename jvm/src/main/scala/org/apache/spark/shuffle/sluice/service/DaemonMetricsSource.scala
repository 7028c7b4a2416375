package org.apache.spark.shuffle.sluice.service

import scala.util.control.NonFatal

import com.codahale.metrics.{Counter, Gauge, MetricRegistry}
import io.sluice.service.{ServiceMetrics, ShuffleService}
import org.apache.spark.SparkConf
import org.apache.spark.shuffle.sluice.internal.SparkInternals

/**
 * The daemon's metrics in Spark's metrics system, the way Spark's standalone
 * `ExternalShuffleService` publishes its own: a metrics system of instance `shuffleService`
 * configured from the daemon's settings (spark.metrics.conf, spark.metrics.conf.*) with one source,
 * [[ServiceMetrics.SourceName]], whose gauges and counters read the service's figures. Stateless;
 * the sinks' threads read the gauges.
 */
object DaemonMetricsSource {

  /** Every metric of [[ServiceMetrics.Metrics]] in a registry, read through `metrics`. */
  def registry(metrics: ServiceMetrics): MetricRegistry = {
    val registry = new MetricRegistry
    ServiceMetrics.Metrics.foreach { m =>
      if (m.counter) registry.register(m.name, new Counter { override def getCount: Long = m.value(metrics.current) })
      else registry.register(m.name, new Gauge[Long] { override def getValue: Long = m.value(metrics.current) })
    }
    registry
  }

  /**
   * Starts the metrics system of `service` from the daemon's `settings`; fails naming
   * spark.metrics.conf when a sink or source it configures cannot start.
   */
  def start(service: ShuffleService, settings: Map[String, String]): SparkInternals.OwnMetricsSystem = {
    val conf = new SparkConf(false).setAll(settings)
    try SparkInternals.startShuffleServiceMetricsSystem(conf, ServiceMetrics.SourceName,
        registry(new ServiceMetrics(() => service.figures)))
    catch {
      case NonFatal(e) => throw new IllegalArgumentException("the metrics system configured by spark.metrics.conf / " +
            s"spark.metrics.conf.* (instance shuffleService) could not start: $e", e)
    }
  }
}
