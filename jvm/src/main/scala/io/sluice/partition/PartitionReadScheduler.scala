package io.sluice.partition

import java.util.concurrent.{LinkedBlockingQueue, RejectedExecutionException, ThreadPoolExecutor, TimeUnit}
import java.util.concurrent.atomic.AtomicInteger

/**
 * The executor's threads that read finished partition files for the server's remote readers
 * (Flink's SortMergeResultPartitionReadScheduler and the I/O executor it runs on, FLINK-19582): a
 * bounded pool of `numThreads` named daemon threads. A reader with credit submits one read at a
 * time (the stored buffers of its next frame, opened and read in file order); reads wait their turn
 * in submission order, so every reader of the executor gets its turn. Idle threads end after a
 * minute; [[shutdown]] lets queued reads finish (they find their readers released) and ends every
 * thread. Thread-safe.
 */
final class PartitionReadScheduler(val numThreads: Int, name: String) {
  require(numThreads > 0, s"a read scheduler of $numThreads threads")

  private val threadNumber = new AtomicInteger
  private val executor = new ThreadPoolExecutor(numThreads, numThreads, 60L, TimeUnit.SECONDS,
    new LinkedBlockingQueue[Runnable](),
    (r: Runnable) => {
      val t = new Thread(r, s"${PartitionReadScheduler.ThreadPrefix}$name-${threadNumber.incrementAndGet()}")
      t.setDaemon(true)
      t
    })
  executor.allowCoreThreadTimeOut(true)

  /** Runs `read` on a read thread when one is free; false when the scheduler was shut down. */
  def submit(read: Runnable): Boolean =
    try { executor.execute(read); true }
    catch { case _: RejectedExecutionException => false }

  /** Reads submitted and not started yet. */
  def numQueued: Int = executor.getQueue.size

  /**
   * Takes no more reads and waits up to `timeoutMs` for the queued and running ones to end (a
   * running read is not interrupted: that would close a file handle other readers share), then
   * interrupts what is left. Whether every thread ended.
   */
  def shutdown(timeoutMs: Long): Boolean = {
    executor.shutdown()
    executor.awaitTermination(timeoutMs, TimeUnit.MILLISECONDS) || {
      executor.shutdownNow()
      executor.awaitTermination(timeoutMs, TimeUnit.MILLISECONDS)
    }
  }
}

object PartitionReadScheduler {

  /** Every read thread's name starts with this. */
  val ThreadPrefix = "sluice-partition-read-"

  /** The threads of `configured` (spark.sluice.network.readThreads): 0 means the cores, at most 4. */
  def threads(configured: Int): Int =
    if (configured > 0) configured else math.min(4, Runtime.getRuntime.availableProcessors())
}
