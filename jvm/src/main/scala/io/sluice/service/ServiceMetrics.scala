package io.sluice.service

import io.sluice.metrics.MetricNames

/**
 * A node shuffle service's metrics as metrics systems publish them (Spark's for the daemon, the
 * NodeManager's Hadoop metrics2 on YARN; Spark's `ExternalShuffleService` and `YarnShuffleService`
 * do the same for the sort shuffle): the figures of its status ([[ServiceFigures]]) under
 * [[ServiceMetrics.Metrics]]' names, read from `figures` at most once a `maxAgeMs`, so a sink
 * reading every gauge in turn walks the applications' dirs once. Thread-safe.
 */
final class ServiceMetrics(figures: () => ServiceFigures, maxAgeMs: Long = 1000L) {

  private var last: ServiceFigures = _
  private var lastNanos = 0L

  /** The service's figures, read now unless the last read is younger than `maxAgeMs`. */
  def current: ServiceFigures = synchronized {
    val now = System.nanoTime()
    if (last == null || now - lastNanos >= maxAgeMs * 1000000L) {
      last = figures()
      lastNanos = now
    }
    last
  }
}

object ServiceMetrics {

  /** The source (Spark) and record (metrics2) the metrics form: `sluiceShuffleService.<name>`. */
  val SourceName = "sluiceShuffleService"

  /**
   * One metric: its name, what it counts, whether it only grows (a counter; else a gauge) and its
   * value in a [[ServiceFigures]].
   */
  final case class Metric(name: String, description: String, counter: Boolean, value: ServiceFigures => Long)

  private def gauge(name: String, description: String)(value: ServiceFigures => Long) =
    Metric(name, description, counter = false, value)

  /**
   * Every metric of the service. Its status's figures go by the words of the Sluice tab's
   * `node_services` block; its server's reads of partition files by the executor's names for the
   * same figures ([[MetricNames.ServerMetrics]]; `queued_reads` is its `readQueueLength`).
   */
  val Metrics: Seq[Metric] = Seq(
    gauge("registered_applications", "Applications registered with the service")(_.registeredApplications.toLong),
    gauge("registered_executors", "Executors registered with the service, every application's, gone ones included")(
      _.registeredExecutors.toLong),
    gauge("connections", "Connections open now")(_.totals.connections.toLong),
    gauge("readers", "Remote input channels being served now")(_.totals.readers.toLong),
    Metric("bytes_sent", "Bytes of map output sent since the service started", counter = true, _.totals.bytesSent),
    gauge("queued_reads", "Read requests waiting for a read thread or a read buffer")(_.totals.queuedReads.toLong),
    gauge("disk_files", "Files in the registered applications' dirs")(_.diskFiles.toLong),
    gauge("disk_bytes", "Bytes of the files in the registered applications' dirs")(_.diskBytes),
    gauge(MetricNames.ReadThreads, "Read threads alive")(_.totals.reads.threads.toLong),
    gauge(MetricNames.ReadWaitTimeMs, "Milliseconds reads waited for a read thread or buffer, in all")(
      _.totals.reads.waitTimeMs),
    gauge(MetricNames.TotalReadMemorySegments, "Memory segments of the read memory")(_.totals.reads.totalSegments.toLong),
    gauge(MetricNames.UsedReadMemorySegments, "Read memory segments holding frames")(_.totals.reads.usedSegments.toLong),
    gauge(MetricNames.PartitionFileDescriptors, "File descriptors of the partition files kept open")(
      _.totals.reads.fileDescriptors.toLong))
}
