package io.sluice.metrics

import java.util.concurrent.ConcurrentHashMap

import io.sluice.memory.NetworkBufferPool

/**
 * The executor's network metrics (Flink's TaskManager metric group with its Shuffle.Netty
 * metrics): one [[TaskIOMetricGroup]] per live task attempt, the final snapshots of the last
 * `maxFinished` finished ones, executor-wide totals that survive eviction, and the network memory
 * of the executor's [[NetworkBufferPool]]. Finished tasks wait for the next report (at most
 * `maxUnreported` of them).
 *
 * [[tick]] (the metrics thread, every report interval) samples every live group, advances the
 * executor's meters and returns what to send to the driver: the live tasks plus the tasks that
 * finished since the previous tick. Thread-safe.
 */
final class ShuffleMetricRegistry(
    val executorId: String,
    bufferPool: NetworkBufferPool,
    clock: Clock = SystemClock,
    maxFinished: Int = ShuffleMetricRegistry.DefaultMaxFinished,
    maxUnreported: Int = ShuffleMetricRegistry.DefaultMaxUnreported,
    rateWindow: Int = TaskIOMetricGroup.DefaultRateWindow,
    latencyHistorySize: Int = LatencyHistogram.DefaultHistorySize) {

  require(maxFinished > 0 && maxUnreported > 0, s"keep at least one finished task, not $maxFinished / $maxUnreported")

  private val live = new ConcurrentHashMap[TaskKey, TaskIOMetricGroup]()
  private val lock = new Object
  private val finished = new java.util.LinkedHashMap[TaskKey, TaskIOSnapshot]() // guarded by lock
  private val unreported = new java.util.ArrayDeque[TaskIOSnapshot]() // guarded by lock
  private val finishedTotals = new Array[Long](MetricNames.Counters.size) // guarded by lock
  private val startNanos = clock.nanoTime()
  private val totalMeters = Array.fill(MetricNames.Counters.size)(new RateMeter(rateWindow, startNanos))
  @volatile private var latest: ExecutorAggregate = ExecutorAggregate.empty
  @volatile private var latencyHistogram: LatencyHistogram = _

  /** The group of `key`'s task attempt, created on first use. */
  def group(key: TaskKey): TaskIOMetricGroup = live.computeIfAbsent(key, k => new TaskIOMetricGroup(k, clock, rateWindow))

  def liveGroup(key: TaskKey): Option[TaskIOMetricGroup] = Option(live.get(key))

  def numLiveGroups: Int = live.size

  /**
   * Switches latency tracking on for `group`'s task, and creates the executor-wide latency
   * histogram the first time any task does.
   */
  def enableLatencyTracking(group: TaskIOMetricGroup, granularity: LatencyGranularity): LatencyStats = {
    if (latencyHistogram == null) lock.synchronized {
      if (latencyHistogram == null) latencyHistogram = new LatencyHistogram(latencyHistorySize)
    }
    group.enableLatencyTracking(granularity, latencyHistorySize, Some(latencyHistogram))
  }

  /** All latency markers this executor's tasks received, or None while no task tracks latency. */
  def executorLatency: Option[LatencyHistogram] = Option(latencyHistogram)

  /**
   * Ends `key`'s group: its final snapshot joins the finished ones (evicting the oldest beyond
   * `maxFinished`) and the next report. Idempotent; None if the task had no group.
   */
  def finish(key: TaskKey): Option[TaskIOSnapshot] = {
    val g = live.get(key)
    if (g == null) None
    else {
      val s = g.finish()
      lock.synchronized {
        if (live.remove(key, g)) {
          val c = ShuffleMetricRegistry.countersOf(s)
          var i = 0
          while (i < c.length) { finishedTotals(i) += c(i); i += 1 }
          finished.put(key, s)
          if (finished.size > maxFinished) finished.remove(finished.keySet().iterator().next())
          unreported.add(s)
          while (unreported.size > maxUnreported) unreported.poll()
        }
      }
      Some(s)
    }
  }

  @volatile private var executorCounters: () => Seq[(String, Long)] = () => Nil

  /** Where the executor's own counters ([[MetricNames.ExecutorCounters]]) come from, read with [[totals]]. */
  def setExecutorCounters(probe: () => Seq[(String, Long)]): Unit = executorCounters = probe

  @volatile private var transportProbe: () => TransportSnapshot = () => TransportSnapshot.none

  /** Where the executor's transport state comes from, once its server runs. */
  def setTransportProbe(probe: () => TransportSnapshot): Unit = transportProbe = probe

  def transport: TransportSnapshot = transportProbe()

  /** The network memory: the [[NetworkBufferPool]]'s segments and the server's read memory. */
  def segments: SegmentsSnapshot = {
    val reads = transport.reads
    val total = bufferPool.totalSegments + reads.totalSegments
    val available = bufferPool.numberOfAvailableSegments + reads.totalSegments - reads.usedSegments
    SegmentsSnapshot(bufferPool.segmentSize, total, available, total - available)
  }

  /** Executor totals of every task counter (finished and live tasks) and the executor's own counters, read now. */
  def totals: Map[String, Long] = {
    val sums = lock.synchronized {
      val s = finishedTotals.clone()
      live.values().forEach { g =>
        val c = g.currentCounters
        var i = 0
        while (i < c.length) { s(i) += c(i); i += 1 }
      }
      s
    }
    MetricNames.Counters.zip(sums).toMap ++ executorCounters()
  }

  /**
   * Samples every live task, advances the executor's rates and returns the report for the driver:
   * the live tasks and the tasks finished since the last tick.
   */
  def tick(): ExecutorSnapshot = {
    val liveSnapshots = live.values().toArray(new Array[TaskIOMetricGroup](0)).toSeq.map(_.sample())
    val drained = lock.synchronized {
      val out = unreported.toArray(new Array[TaskIOSnapshot](0)).toSeq
      unreported.clear()
      out
    }
    val t = totals
    val now = clock.nanoTime()
    val rates = MetricNames.Counters.zip(totalMeters).map { case (n, m) =>
      (n + MetricNames.PerSecond) -> m.update(now, t(n))
    }.toMap
    latest = ExecutorAggregate(liveSnapshots, rates)
    ExecutorSnapshot(executorId, clock.currentTimeMillis(), segments, liveSnapshots.filter(_.running) ++ drained, t, rates,
      transport)
  }

  /** Everything retained: live tasks sampled now and the finished ones (a local view; no tick). */
  def snapshot(): ExecutorSnapshot = {
    val liveSnapshots = live.values().toArray(new Array[TaskIOMetricGroup](0)).toSeq.map(_.sample())
    val done = lock.synchronized(finished.values().toArray(new Array[TaskIOSnapshot](0)).toSeq)
    ExecutorSnapshot(executorId, clock.currentTimeMillis(), segments, liveSnapshots.filter(_.running) ++ done,
      transport = transport)
  }

  /** The executor-wide view computed at the last tick (what Spark's metrics system exports). */
  def aggregate: ExecutorAggregate = latest
}

object ShuffleMetricRegistry {
  val DefaultMaxFinished = 1000

  /** Finished tasks one report may carry (more finishing within one report interval are dropped). */
  val DefaultMaxUnreported = 10000

  private[metrics] def countersOf(s: TaskIOSnapshot): Array[Long] = Array(s.numRecordsOut, s.numRecordsIn,
    s.numBytesOut, s.numBytesIn, s.numBytesInLocal, s.numBytesInRemote, s.numBuffersOut, s.numBuffersInLocal,
    s.numBuffersInRemote, s.numInputGates, s.numInputChannels, s.numPartitionRequests, s.numControlMessages)
}

/**
 * The executor-wide values Spark's metrics system exports under Flink's names, from one tick:
 * the highest pool usage and time share among the running tasks (one backpressured task is
 * enough to show), summed queue lengths, and the executor's rates. Immutable.
 */
final case class ExecutorAggregate(running: Seq[TaskIOSnapshot], rates: Map[String, Double]) {
  private def maxOf(f: TaskIOSnapshot => Double): Double = running.iterator.filter(_.running).map(f).maxOption.getOrElse(0.0)

  def outPoolUsage: Double = maxOf(_.outPoolUsage)
  def inPoolUsage: Double = maxOf(_.inPoolUsage)
  def floatingBuffersUsage: Double = maxOf(_.floatingBuffersUsage)
  def exclusiveBuffersUsage: Double = maxOf(_.exclusiveBuffersUsage)
  def backPressuredTimeMsPerSecond: Double = maxOf(_.backPressuredTimeMsPerSecond)
  def busyTimeMsPerSecond: Double = maxOf(_.busyTimeMsPerSecond)
  def idleTimeMsPerSecond: Double = maxOf(_.idleTimeMsPerSecond)
  def outputQueueLength: Long = running.iterator.filter(_.running).map(_.outputQueueLength.toLong).sum
  def inputQueueLength: Long = running.iterator.filter(_.running).map(_.inputQueueLength.toLong).sum
  def rate(name: String): Double = rates.getOrElse(name, 0.0)
}

object ExecutorAggregate {
  val empty: ExecutorAggregate = ExecutorAggregate(Nil, Map.empty)
}
