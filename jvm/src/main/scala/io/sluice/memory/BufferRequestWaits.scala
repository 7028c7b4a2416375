package io.sluice.memory

import java.util.concurrent.atomic.LongAdder

/**
 * Where a task's waits for network buffers are counted: the time a thread spends blocked in
 * [[NetworkBufferPool]] (for room for a pool's or channel's required segments, for exclusive
 * buffers) or in [[LocalBufferPool.requestBufferBlocking]] goes to the counter bound to that thread,
 * the one of the task it runs (its metric group binds it on the task thread; Flink counts the
 * producer's part as backPressuredTime). Unbound threads count nothing. Waits are never on a hot
 * path: one thread-local read per wait. Thread-safe.
 */
object BufferRequestWaits {

  private val current = new ThreadLocal[LongAdder]

  /** Counts this thread's waits into `nanos` from now on. */
  def bind(nanos: LongAdder): Unit = current.set(nanos)

  /** Stops counting this thread's waits (if `nanos` is still the one bound). */
  def unbind(nanos: LongAdder): Unit = if (current.get() eq nanos) current.remove()

  /** Adds a wait of `nanos` of this thread. */
  def add(nanos: Long): Unit = {
    val c = current.get()
    if (c != null && nanos > 0) c.add(nanos)
  }

  /** Runs `body`, a wait for buffers, and counts its duration for this thread. */
  def time[T](body: => T): T = {
    val start = System.nanoTime()
    try body
    finally add(System.nanoTime() - start)
  }
}
