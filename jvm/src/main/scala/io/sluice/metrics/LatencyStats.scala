package io.sluice.metrics

import java.util.Locale

/** How finely latency histograms are split (Flink's metrics.latency.granularity). */
sealed abstract class LatencyGranularity(val name: String) {
  override def toString: String = name
}

object LatencyGranularity {

  /** One histogram per consumer task. */
  case object Single extends LatencyGranularity("single")

  /** One per producer stage and consumer task. */
  case object Operator extends LatencyGranularity("operator")

  /** One per producer task and consumer task: quadratic in the parallelism. */
  case object Subtask extends LatencyGranularity("subtask")

  val all: Seq[LatencyGranularity] = Seq(Single, Operator, Subtask)

  def parse(s: String): LatencyGranularity = all.find(_.name == s.trim.toLowerCase(Locale.ROOT)).getOrElse(
    throw new IllegalArgumentException(s"Unknown latency granularity '$s': use ${all.mkString(", ")}"))
}

/**
 * A histogram over the last `historySize` values (Flink's DescriptiveStatisticsHistogram with
 * metrics.latency.history-size): min, max, mean and percentiles describe that window, `count`
 * every value ever added. Percentiles interpolate linearly between the two nearest ranks.
 * Thread-safe (the task thread adds, the metrics thread reads).
 */
final class LatencyHistogram(val historySize: Int) {
  require(historySize > 0, s"a histogram needs room for at least one value, not $historySize")

  private val window = new Array[Long](historySize)
  private var filled = 0
  private var next = 0
  private var total = 0L

  def update(value: Long): Unit = synchronized {
    window(next) = value
    next = (next + 1) % historySize
    if (filled < historySize) filled += 1
    total += 1
  }

  def count: Long = synchronized(total)

  /** The values in the window, oldest first. */
  def values: Array[Long] = synchronized {
    val out = new Array[Long](filled)
    val start = if (filled < historySize) 0 else next
    var i = 0
    while (i < filled) { out(i) = window((start + i) % historySize); i += 1 }
    out
  }

  def snapshot(sourceStage: Int, sourceIndex: Int): LatencySnapshot = {
    val (vs, n) = synchronized((values, total))
    java.util.Arrays.sort(vs)
    if (vs.isEmpty) LatencySnapshot(sourceStage, sourceIndex, n, 0, 0, 0, 0, 0, 0, 0)
    else LatencySnapshot(sourceStage, sourceIndex, n, vs.head.toDouble, vs.last.toDouble,
      vs.iterator.map(_.toDouble).sum / vs.length,
      LatencyHistogram.quantile(vs, 0.5), LatencyHistogram.quantile(vs, 0.95),
      LatencyHistogram.quantile(vs, 0.99), LatencyHistogram.quantile(vs, 0.999))
  }
}

object LatencyHistogram {

  /** Flink's default metrics.latency.history-size. */
  val DefaultHistorySize = 128

  /** The q-quantile of sorted `vs`, interpolating between the nearest ranks. */
  def quantile(vs: Array[Long], q: Double): Double = {
    require(vs.nonEmpty && q >= 0 && q <= 1)
    val pos = q * (vs.length - 1)
    val lo = math.floor(pos).toInt
    val hi = math.min(lo + 1, vs.length - 1)
    vs(lo) + (vs(hi) - vs(lo)) * (pos - lo)
  }
}

/**
 * The latency histograms of one consumer task (Flink's LatencyStats): each latency marker that
 * reaches the task adds its age (now minus its creation time, in ms) to the histogram its
 * producer falls into under `granularity`, and to the executor's overall histogram if there is
 * one. Exists only when latency tracking is on. Thread-safe.
 */
final class LatencyStats(
    val granularity: LatencyGranularity,
    historySize: Int,
    clock: Clock,
    executorHistogram: Option[LatencyHistogram] = None) {

  private val histograms = new java.util.LinkedHashMap[(Int, Int), LatencyHistogram]()

  /** Records one marker created at `createdAtMillis` by task `sourceIndex` of stage `sourceStage`. */
  def reportLatency(createdAtMillis: Long, sourceStage: Int, sourceIndex: Int): Unit = {
    val age = math.max(0L, clock.currentTimeMillis() - createdAtMillis)
    val key = granularity match {
      case LatencyGranularity.Single => (-1, -1)
      case LatencyGranularity.Operator => (sourceStage, -1)
      case LatencyGranularity.Subtask => (sourceStage, sourceIndex)
    }
    val h = synchronized {
      var found = histograms.get(key)
      if (found == null) { found = new LatencyHistogram(historySize); histograms.put(key, found) }
      found
    }
    h.update(age)
    executorHistogram.foreach(_.update(age))
  }

  def numHistograms: Int = synchronized(histograms.size)

  def snapshot: Seq[LatencySnapshot] = {
    val hs = synchronized(histograms.entrySet().toArray(new Array[java.util.Map.Entry[(Int, Int), LatencyHistogram]](0)))
    hs.toSeq.map(e => e.getValue.snapshot(e.getKey._1, e.getKey._2))
  }

  /**
   * The statistics over the windows of all of the task's histograms together (sources -1): what
   * a table with one row per task shows. None before the first marker.
   */
  def total: Option[LatencySnapshot] = {
    val hs = synchronized(histograms.values().toArray(new Array[LatencyHistogram](0)))
    if (hs.isEmpty) None
    else {
      val merged = new LatencyHistogram(math.max(1, hs.map(_.historySize).sum))
      hs.foreach(_.values.foreach(merged.update))
      Some(merged.snapshot(-1, -1).copy(count = hs.map(_.count).sum))
    }
  }
}
