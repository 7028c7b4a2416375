package io.sluice.metrics

import java.util.concurrent.atomic.LongAdder

/**
 * Time a task spends in one kind of wait (Flink's backPressuredTime, idleTime), readable while a
 * wait is still going on. One thread waits at a time; any thread reads. Thread-safe.
 */
final class WaitTime {

  /** Nanoseconds of the waits that ended. */
  val nanos = new LongAdder

  /** When the current wait began (System.nanoTime), 0 when not waiting. */
  @volatile private var since = 0L

  /** Runs `body`, a wait, and counts its duration. */
  def time[T](body: => T): T = {
    val start = System.nanoTime()
    since = start
    try body
    finally {
      nanos.add(System.nanoTime() - start)
      since = 0L
    }
  }

  /** Nanoseconds so far, including a wait that has not ended yet. */
  def nanosNow: Long = {
    val current = since
    val done = nanos.sum()
    if (current == 0L) done else done + math.max(0L, System.nanoTime() - current)
  }
}
