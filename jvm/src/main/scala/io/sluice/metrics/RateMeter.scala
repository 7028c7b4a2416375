package io.sluice.metrics

/**
 * Turns a growing total into a per-second rate over a sliding window of its last samples
 * (Flink's MeterView, which averages over the last 60 s updated every 5 s; here the window is the
 * last `windowSamples` metric ticks). The first sample is the total when the meter started, so a
 * task that lived shorter than one tick gets its average rate over its whole life.
 *
 * Not thread-safe: the owner samples it from one thread at a time.
 */
final class RateMeter(windowSamples: Int, startNanos: Long, startCount: Long = 0L) {
  require(windowSamples >= 1, s"a rate needs a window of at least one sample, not $windowSamples")

  private val times = new Array[Long](windowSamples + 1)
  private val counts = new Array[Long](windowSamples + 1)
  private var size = 1
  private var newest = 0
  times(0) = startNanos
  counts(0) = startCount
  private var current = 0.0

  /** Records the total at `nowNanos` and returns the rate per second over the window. */
  def update(nowNanos: Long, total: Long): Double = {
    if (nowNanos > times(newest)) {
      newest = (newest + 1) % times.length
      times(newest) = nowNanos
      counts(newest) = total
      if (size < times.length) size += 1
      val oldest = (newest - size + 1 + times.length) % times.length
      val seconds = (times(newest) - times(oldest)) / 1e9
      current = if (seconds <= 0) 0.0 else math.max(0.0, (counts(newest) - counts(oldest)) / seconds)
    }
    current
  }

  /** The rate computed at the last update (0 before the first). */
  def rate: Double = current
}
