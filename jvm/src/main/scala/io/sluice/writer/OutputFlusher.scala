package io.sluice.writer

import java.util.concurrent.{ScheduledFuture, ScheduledThreadPoolExecutor, ThreadFactory, TimeUnit}

import io.sluice.partition.ResultPartition

/**
 * Flushes pipelined result partitions every buffer timeout (Flink's OutputFlusher), so a record
 * in a partly filled buffer waits at most about that long. One daemon thread per executor serves
 * every partition; flushing only makes data readable and never closes a buffer. The same thread
 * times latency markers ([[every]]). Thread-safe.
 */
final class OutputFlusher(threadName: String = "sluice-output-flusher") {

  private val executor = {
    val e = new ScheduledThreadPoolExecutor(1, new ThreadFactory {
      override def newThread(r: Runnable): Thread = {
        val t = new Thread(r, threadName)
        t.setDaemon(true)
        t
      }
    })
    e.setRemoveOnCancelPolicy(true)
    e.setExecuteExistingDelayedTasksAfterShutdownPolicy(false)
    e
  }

  /**
   * Starts flushing `partition` every `timeoutMs` (> 0). Stop it with the returned handle when the
   * partition finishes.
   */
  def register(partition: ResultPartition, timeoutMs: Long): OutputFlusher.Registration = {
    require(timeoutMs > 0, s"the output flusher needs a positive buffer timeout, not $timeoutMs")
    val task: Runnable = () => if (!partition.isReleased && !partition.isFinished) partition.flushAll()
    val f = executor.scheduleAtFixedRate(task, timeoutMs, timeoutMs, TimeUnit.MILLISECONDS)
    new OutputFlusher.Registration(f)
  }

  /**
   * Runs `task` every `intervalMs` on the flusher's thread (the latency-marker timer uses it); the
   * task must be short. Stop it with the returned handle.
   */
  def every(intervalMs: Long)(task: () => Unit): OutputFlusher.Registration = {
    require(intervalMs > 0, s"a periodic task needs a positive interval, not $intervalMs")
    val r: Runnable = () => task()
    new OutputFlusher.Registration(executor.scheduleAtFixedRate(r, intervalMs, intervalMs, TimeUnit.MILLISECONDS))
  }

  def numRegistered: Int = executor.getQueue.size()

  def shutdown(): Unit = executor.shutdownNow()
}

object OutputFlusher {
  final class Registration private[OutputFlusher] (future: ScheduledFuture[_]) {
    def cancel(): Unit = future.cancel(false)
  }
}
