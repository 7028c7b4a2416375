package io.sluice.metrics

import java.util.concurrent.atomic.AtomicLong

/** A clock tests move by hand; both of its times advance together. Thread-safe. */
final class ManualClock(startMillis: Long = 1000000L) extends Clock {
  private val nanos = new AtomicLong(startMillis * 1000000L)

  def advanceMillis(ms: Long): Unit = nanos.addAndGet(ms * 1000000L)

  override def nanoTime(): Long = nanos.get()

  override def currentTimeMillis(): Long = nanos.get() / 1000000L
}
