package org.apache.spark.shuffle.sluice

import com.codahale.metrics.{Counter, Gauge, Histogram, MetricRegistry, Reservoir, Snapshot, UniformSnapshot}
import io.sluice.config.SluiceConf
import io.sluice.metrics.{ExecutorAggregate, LatencyHistogram, MetricNames, ShuffleMetricRegistry}

/**
 * Publishes an executor's Sluice metrics in Spark's metrics system (the plugin's
 * PluginContext.metricRegistry, exported as `<namespace>.<executor>.plugin.<plugin class>.<name>`)
 * under Flink's names: the memory segments; the task I/O counters summed over every task the
 * executor ran and their ...PerSecond rates; the highest pool usage and time share among its
 * running tasks; summed queue lengths; and, once any task tracks latency, a `latency` histogram
 * of every marker's age. Per-task values go to the driver (Sluice tab, `sluice.metrics`) instead,
 * since Spark tasks are too many and too short-lived to be metric scopes of their own.
 *
 * The executor's network stack starts with its first task; until then the gauges read the
 * configured memory and zeros. Gauges are read by reporter threads; all reads are thread-safe.
 */
private[sluice] final class SluiceMetricsSource(
    registry: MetricRegistry,
    metrics: () => Option[ShuffleMetricRegistry],
    conf: SluiceConf) {

  @volatile private var latencyRegistered = false

  private def gauge[T](name: String)(f: => T): Unit = registry.register(name, new Gauge[T] { override def getValue: T = f })

  private def aggregate: ExecutorAggregate = metrics().map(_.aggregate).getOrElse(ExecutorAggregate.empty)

  private def segments: (Int, Int) = metrics() match {
    case Some(m) => val s = m.segments; (s.total, s.available)
    case None => (conf.numberOfSegments, conf.numberOfSegments)
  }

  /** Registers every metric but the latency histogram (which appears with the first tracked task). */
  def register(): Unit = {
    gauge[Int](MetricNames.TotalMemorySegments)(segments._1)
    gauge[Int](MetricNames.AvailableMemorySegments)(segments._2)
    gauge[Int](MetricNames.UsedMemorySegments) { val (t, a) = segments; t - a }
    MetricNames.Counters.foreach { name =>
      registry.register(name, new Counter {
        override def getCount: Long = metrics().map(_.totals.getOrElse(name, 0L)).getOrElse(0L)
      })
    }
    MetricNames.Rates.foreach(name => gauge[Double](name)(aggregate.rate(name)))
    gauge[Double](MetricNames.OutPoolUsage)(aggregate.outPoolUsage)
    gauge[Double](MetricNames.InPoolUsage)(aggregate.inPoolUsage)
    gauge[Double](MetricNames.FloatingBuffersUsage)(aggregate.floatingBuffersUsage)
    gauge[Double](MetricNames.ExclusiveBuffersUsage)(aggregate.exclusiveBuffersUsage)
    gauge[Long](MetricNames.OutputQueueLength)(aggregate.outputQueueLength)
    gauge[Long](MetricNames.InputQueueLength)(aggregate.inputQueueLength)
    gauge[Double](MetricNames.BackPressuredTimeMsPerSecond)(aggregate.backPressuredTimeMsPerSecond)
    gauge[Double](MetricNames.BusyTimeMsPerSecond)(aggregate.busyTimeMsPerSecond)
    gauge[Double](MetricNames.IdleTimeMsPerSecond)(aggregate.idleTimeMsPerSecond)
  }

  /** Adds the `latency` histogram once the executor has one (called every report tick). */
  def registerLatencyIfTracked(): Unit = if (!latencyRegistered) {
    metrics().flatMap(_.executorLatency).foreach { h =>
      synchronized {
        if (!latencyRegistered) {
          registry.register(MetricNames.Latency, new SluiceMetricsSource.LatencyMetric(h))
          latencyRegistered = true
        }
      }
    }
  }

  def hasLatency: Boolean = latencyRegistered
}

private[sluice] object SluiceMetricsSource {

  /** A Dropwizard histogram that reads Sluice's latency window instead of keeping its own. */
  final class LatencyMetric(h: LatencyHistogram) extends Histogram(new WindowReservoir(h)) {
    override def update(value: Long): Unit = h.update(value)
    override def getCount: Long = h.count
  }

  private final class WindowReservoir(h: LatencyHistogram) extends Reservoir {
    override def size(): Int = h.values.length
    override def update(value: Long): Unit = h.update(value)
    override def getSnapshot: Snapshot = new UniformSnapshot(h.values)
  }
}
