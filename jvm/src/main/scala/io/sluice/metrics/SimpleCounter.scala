package io.sluice.metrics

import java.util.concurrent.atomic.AtomicLong

/**
 * A counter with one writing thread and any number of readers (Flink's SimpleCounter, made safe
 * to read from the metrics thread): the writer publishes with an ordered store, which costs no
 * more than a plain one on the hot path. Use a LongAdder where several threads write.
 */
final class SimpleCounter {
  private val value = new AtomicLong

  /** Adds `n`; only ever called by the owning thread. */
  def inc(n: Long = 1L): Unit = value.lazySet(value.get() + n)

  def count: Long = value.get()
}
