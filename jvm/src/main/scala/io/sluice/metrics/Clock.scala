package io.sluice.metrics

/**
 * Where metrics read the time: the system clock in production, a manual one in tests so rates
 * and latencies can be checked exactly. Implementations are thread-safe.
 */
trait Clock {

  /** Monotonic time for durations and rates. */
  def nanoTime(): Long

  /** Wall-clock time for timestamps and latency markers (which cross JVMs). */
  def currentTimeMillis(): Long
}

object SystemClock extends Clock {
  override def nanoTime(): Long = System.nanoTime()
  override def currentTimeMillis(): Long = System.currentTimeMillis()
}
