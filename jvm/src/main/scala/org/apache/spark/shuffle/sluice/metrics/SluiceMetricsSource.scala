package org.apache.spark.shuffle.sluice.metrics

import com.codahale.metrics.{Counter, Gauge, Histogram, MetricRegistry, Reservoir, Snapshot, UniformSnapshot}
import io.sluice.config.SluiceConf
import io.sluice.metrics.{
  ExecutorAggregate, LatencyHistogram, MetricNames, MetricStore, ServerReadSnapshot, ShuffleMetricRegistry
}
import org.apache.spark.shuffle.sluice.internal.SparkInternals

/**
 * Sluice's metrics for Spark's metrics system under Flink's names, in `registry`, which
 * [[SluiceMetricsSource.publish]] registers as the source `sluice` ([[MetricNames.SourceName]]):
 * exported as `<spark.metrics.namespace, else the application id>.<executor id>.sluice.<name>`,
 * whichever way Sluice was switched on. They are the
 * memory segments; the task I/O counters summed over every task and their ...PerSecond rates; the
 * executor's own counters (index bytes read and needed); the highest pool usage and time share
 * among the running tasks; summed queue lengths; the Sluice server's reads of partition files
 * (summed over executors on the driver); and, once
 * any task tracks latency, a `latency` histogram of every marker's age. Per-task values go to the
 * driver (Sluice tab, `sluice.metrics`) instead, since Spark tasks are too many and too
 * short-lived to be metric scopes of their own.
 *
 * The values come from one executor ([[SluiceMetricsSource.ExecutorValues]], the executor plugin)
 * or from the driver's copy of every executor's reports ([[SluiceMetricsSource.ClusterValues]],
 * the driver plugin on a cluster, where executors' own metrics stay in their JVMs). All reads are
 * thread-safe.
 */
private[sluice] final class SluiceMetricsSource(registry: MetricRegistry, values: SluiceMetricsSource.Values) {

  @volatile private var latencyRegistered = false

  private def gauge[T](name: String)(f: => T): Unit = registry.register(name, new Gauge[T] { override def getValue: T = f })

  /** Registers every metric but the latency histogram (which appears with the first tracked task). */
  def register(): Unit = {
    gauge[Int](MetricNames.TotalMemorySegments)(values.segments._1)
    gauge[Int](MetricNames.AvailableMemorySegments)(values.segments._2)
    gauge[Int](MetricNames.UsedMemorySegments) { val (t, a) = values.segments; t - a }
    MetricNames.ServerMetrics.foreach(name => gauge[Long](name)(values.reads.values.find(_._1 == name).fold(0L)(_._2)))
    (MetricNames.Counters ++ MetricNames.ExecutorCounters).foreach { name =>
      registry.register(name, new Counter { override def getCount: Long = values.total(name) })
    }
    MetricNames.Rates.foreach(name => gauge[Double](name)(values.aggregate.rate(name)))
    gauge[Double](MetricNames.OutPoolUsage)(values.aggregate.outPoolUsage)
    gauge[Double](MetricNames.InPoolUsage)(values.aggregate.inPoolUsage)
    gauge[Double](MetricNames.FloatingBuffersUsage)(values.aggregate.floatingBuffersUsage)
    gauge[Double](MetricNames.ExclusiveBuffersUsage)(values.aggregate.exclusiveBuffersUsage)
    gauge[Long](MetricNames.OutputQueueLength)(values.aggregate.outputQueueLength)
    gauge[Long](MetricNames.InputQueueLength)(values.aggregate.inputQueueLength)
    gauge[Double](MetricNames.BackPressuredTimeMsPerSecond)(values.aggregate.backPressuredTimeMsPerSecond)
    gauge[Double](MetricNames.BusyTimeMsPerSecond)(values.aggregate.busyTimeMsPerSecond)
    gauge[Double](MetricNames.IdleTimeMsPerSecond)(values.aggregate.idleTimeMsPerSecond)
  }

  /** Adds the `latency` histogram once there is one (called every report tick). */
  def registerLatencyIfTracked(): Unit = if (!latencyRegistered) {
    values.latency.foreach { h =>
      synchronized {
        if (!latencyRegistered) {
          registry.register(MetricNames.Latency, new SluiceMetricsSource.LatencyMetric(h))
          latencyRegistered = true
        }
      }
    }
  }
}

private[sluice] object SluiceMetricsSource {

  /**
   * Registers `registry` with this JVM's metrics system as the source [[MetricNames.SourceName]],
   * once the metrics system can name it (see [[SparkInternals.canNameMetricsSource]]); None until
   * then, so callers try again later.
   */
  def publish(registry: MetricRegistry): Option[SparkInternals.RegisteredSource] =
    if (!SparkInternals.canNameMetricsSource(SparkInternals.conf)) None
    else Some(SparkInternals.registerMetricsSource(MetricNames.SourceName, registry))

  /** Where the exported values come from. */
  trait Values {

    /** (total, available) memory segments. */
    def segments: (Int, Int)
    def total(counter: String): Long
    def aggregate: ExecutorAggregate
    def latency: Option[LatencyHistogram]

    /** The Sluice server's reads ([[MetricNames.ServerMetrics]]). */
    def reads: ServerReadSnapshot
  }

  /**
   * One executor's values. Until its network stack starts (with the executor, or with its first
   * shuffle task) the gauges read the configured memory and zeros.
   */
  final class ExecutorValues(metrics: () => Option[ShuffleMetricRegistry], conf: SluiceConf) extends Values {
    override def segments: (Int, Int) = metrics() match {
      case Some(m) => val s = m.segments; (s.total, s.available)
      case None => (conf.numberOfSegments, conf.numberOfSegments)
    }
    override def total(counter: String): Long = metrics().map(_.totals.getOrElse(counter, 0L)).getOrElse(0L)
    override def aggregate: ExecutorAggregate = metrics().map(_.aggregate).getOrElse(ExecutorAggregate.empty)
    override def latency: Option[LatencyHistogram] = metrics().flatMap(_.executorLatency)
    override def reads: ServerReadSnapshot = metrics().fold(ServerReadSnapshot.none)(_.transport.reads)
  }

  /**
   * The whole application, from the executors' latest reports: segments, counters and rates summed
   * over executors, usages and time shares the highest among running tasks. No latency histogram
   * (executors keep the markers' values).
   */
  final class ClusterValues(store: MetricStore) extends Values {
    override def segments: (Int, Int) = {
      val e = store.executorEntries
      (e.map(_.segments.total).sum, e.map(_.segments.available).sum)
    }
    override def total(counter: String): Long = store.executorEntries.map(_.totals.getOrElse(counter, 0L)).sum
    override def aggregate: ExecutorAggregate = {
      val rates = MetricNames.Rates.map(r => r -> store.executorEntries.map(_.rates.getOrElse(r, 0.0)).sum).toMap
      ExecutorAggregate(store.runningTasks, rates)
    }
    override def latency: Option[LatencyHistogram] = None
    override def reads: ServerReadSnapshot =
      store.executorEntries.map(_.transport.reads).foldLeft(ServerReadSnapshot.none)(_ + _)
  }

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
