package org.apache.spark.shuffle.sluice.metrics

import scala.jdk.CollectionConverters._

import com.codahale.metrics.{Counter, Gauge, MetricRegistry}
import io.sluice.NettyLeakDetection
import io.sluice.config.SluiceConf
import io.sluice.metrics._
import org.apache.spark.SparkConf
import org.apache.spark.metrics.MetricsSystem
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.scalatest.funsuite.AnyFunSuite

class SluiceMetricsSourceSuite extends AnyFunSuite with NettyLeakDetection {

  private def gauge(r: MetricRegistry, name: String): Any = r.getGauges.get(name).asInstanceOf[Gauge[_]].getValue
  private def counter(r: MetricRegistry, name: String): Long = r.getCounters.get(name).asInstanceOf[Counter].getCount

  test("every metric is registered under its Flink name; before the network stack starts it reads the configured memory") {
    val r = new MetricRegistry
    new SluiceMetricsSource(r, new SluiceMetricsSource.ExecutorValues(() => None, SluiceConf.defaults)).register()
    val expected = MetricNames.ExecutorMetrics ++ MetricNames.ServerMetrics ++ MetricNames.ExecutorCounters ++
      MetricNames.TaskMetrics
    assert(r.getNames.asScala.toSet == expected.toSet)
    assert(gauge(r, MetricNames.TotalMemorySegments) == 2048 && gauge(r, MetricNames.UsedMemorySegments) == 0)
    assert(gauge(r, MetricNames.ReadQueueLength) == 0L && gauge(r, MetricNames.TotalReadMemorySegments) == 0L)
    assert(counter(r, MetricNames.NumRecordsOut) == 0L && counter(r, MetricNames.IndexBytesRead) == 0L)
    assert(!r.getNames.contains(MetricNames.Latency))
  }

  test("the executor's own counters are exported as counters, from its registry's probe or the reports' totals") {
    val pool = new io.sluice.memory.NetworkBufferPool(4, 4096)
    val registry = new ShuffleMetricRegistry("1", pool)
    var read = 0L
    registry.setExecutorCounters(() => Seq(MetricNames.IndexBytesRead -> read, MetricNames.IndexBytesNeeded -> 2 * read))
    val r = new MetricRegistry
    new SluiceMetricsSource(r, new SluiceMetricsSource.ExecutorValues(() => Some(registry), SluiceConf.defaults)).register()
    read = 300L
    assert(counter(r, MetricNames.IndexBytesRead) == 300L && counter(r, MetricNames.IndexBytesNeeded) == 600L)
    val store = new MetricStore()
    store.add(registry.tick())
    store.add(ExecutorSnapshot("2", 10, SegmentsSnapshot(4096, 4, 4, 0), Nil, Map(MetricNames.IndexBytesRead -> 5L)))
    val cluster = new MetricRegistry
    new SluiceMetricsSource(cluster, new SluiceMetricsSource.ClusterValues(store)).register()
    assert(counter(cluster, MetricNames.IndexBytesRead) == 305L && counter(cluster, MetricNames.IndexBytesNeeded) == 600L)
    pool.destroy()
  }

  test("on a cluster the driver publishes the application's values from the executors' reports") {
    val store = new MetricStore()
    val busy = TestingSnapshots.producer(stageId = 1, outPoolUsage = 0.75).copy(backPressuredTimeMsPerSecond = 300)
    store.add(ExecutorSnapshot("1", 10, SegmentsSnapshot(32768, 100, 90, 10), Seq(busy),
        Map(MetricNames.NumRecordsOut -> 1000L), Map("numRecordsOutPerSecond" -> 50.0),
        TransportSnapshot(7001, 1, 1, ServerReadSnapshot(2, 3, 40L, 16, 5, 8))))
    store.add(ExecutorSnapshot("2", 10, SegmentsSnapshot(32768, 100, 60, 40),
        Seq(TestingSnapshots.producer(stageId = 1, partitionId = 1, outPoolUsage = 0.25)),
        Map(MetricNames.NumRecordsOut -> 500L), Map("numRecordsOutPerSecond" -> 25.0),
        TransportSnapshot(7002, 1, 1, ServerReadSnapshot(1, 1, 2L, 16, 0, 2))))
    val r = new MetricRegistry
    val source = new SluiceMetricsSource(r, new SluiceMetricsSource.ClusterValues(store))
    source.register()
    source.registerLatencyIfTracked()
    assert(gauge(r, MetricNames.TotalMemorySegments) == 200 && gauge(r, MetricNames.AvailableMemorySegments) == 150)
    assert(gauge(r, MetricNames.UsedMemorySegments) == 50)
    assert(gauge(r, MetricNames.ReadQueueLength) == 4L && gauge(r, MetricNames.ReadWaitTimeMs) == 42L)
    assert(gauge(r, MetricNames.UsedReadMemorySegments) == 5L && gauge(r, MetricNames.PartitionFileDescriptors) == 10L)
    assert(counter(r, MetricNames.NumRecordsOut) == 1500L)
    assert(gauge(r, "numRecordsOutPerSecond") == 75.0)
    assert(gauge(r, MetricNames.OutPoolUsage) == 0.75)
    assert(gauge(r, MetricNames.BackPressuredTimeMsPerSecond) == 300.0)
    assert(!r.getNames.contains(MetricNames.Latency))
  }

  test("the executor's latency histogram appears once a task tracks latency, with the markers' statistics") {
    val pool = new io.sluice.memory.NetworkBufferPool(4, 4096)
    val registry = new ShuffleMetricRegistry("1", pool)
    val r = new MetricRegistry
    val source = new SluiceMetricsSource(r, new SluiceMetricsSource.ExecutorValues(() => Some(registry), SluiceConf.defaults))
    source.register()
    source.registerLatencyIfTracked()
    assert(!r.getNames.contains(MetricNames.Latency))
    val stats = registry.enableLatencyTracking(registry.group(TaskKey(1, 0, 0, 1)), LatencyGranularity.Single)
    (1 to 10).foreach(i => stats.reportLatency(System.currentTimeMillis() - 1000, 0, 0))
    source.registerLatencyIfTracked()
    val h = r.getHistograms.get(MetricNames.Latency)
    assert(h.getCount == 10 && h.getSnapshot.getMin >= 1000)
  }

  test("Spark's metrics system names the metrics <namespace>.<executor>.sluice.<name>; the namespace stays Spark's") {
    def sourceName(settings: (String, String)*): String = {
      val conf = new SparkConf(false).setAll(settings)
      assert(SparkInternals.canNameMetricsSource(conf))
      val system = MetricsSystem.createMetricsSystem("executor", conf)
      val r = new MetricRegistry
      new SluiceMetricsSource(r, new SluiceMetricsSource.ExecutorValues(() => None, SluiceConf.defaults)).register()
      val published = SparkInternals.registerMetricsSource(system, MetricNames.SourceName, r)
      val sources = system.getSourcesByName(MetricNames.SourceName)
      assert(sources.size == 1 && sources.head.metricRegistry.getNames.contains(MetricNames.NumRecordsOut))
      val name = system.buildRegistryName(sources.head)
      published.remove()
      assert(system.getSourcesByName(MetricNames.SourceName).isEmpty)
      name
    }
    // Nobody sets spark.metrics.namespace: Spark's default, the application id, comes first.
    assert(sourceName("spark.app.id" -> "app-20260101-0001", "spark.executor.id" -> "3") == "app-20260101-0001.3.sluice")
    assert(sourceName("spark.app.id" -> "local-1", "spark.executor.id" -> "driver") == "local-1.driver.sluice")
    // A namespace the user chose is honoured.
    assert(sourceName("spark.app.id" -> "app-1", "spark.executor.id" -> "3", "spark.metrics.namespace" -> "mine") ==
      "mine.3.sluice")
    // Before Spark knows the application id the source waits (it would lose its prefix).
    assert(!SparkInternals.canNameMetricsSource(new SparkConf(false).set("spark.executor.id", "driver")))
  }
}
