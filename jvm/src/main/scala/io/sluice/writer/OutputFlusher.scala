package io.sluice.writer

import java.util.concurrent.{ScheduledFuture, ScheduledThreadPoolExecutor, ThreadFactory, TimeUnit}

import scala.util.control.NonFatal

import io.sluice.partition.ResultPartition
import org.slf4j.LoggerFactory

/**
 * Flushes pipelined result partitions every buffer timeout (Flink's OutputFlusher), so a record
 * in a partly filled buffer waits at most about that long. One daemon thread per executor serves
 * every partition; flushing only makes data readable and never closes a buffer. The same thread
 * times latency markers ([[every]]). Thread-safe.
 *
 * A periodic task of a ScheduledExecutorService that throws is never run again, so each task here
 * catches its own failures: a partition whose flush throws is logged once (naming it) and flushed
 * again at the next tick, and every other partition goes on being flushed.
 */
final class OutputFlusher(threadName: String = "sluice-output-flusher") {

  private val executor = {
    val e = new ScheduledThreadPoolExecutor(1,
      new ThreadFactory {
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
    val task = new OutputFlusher.Surviving(s"Flushing $partition",
      () =>
        if (!partition.isReleased && !partition.isFinished) partition.flushAll())
    val f = executor.scheduleAtFixedRate(task, timeoutMs, timeoutMs, TimeUnit.MILLISECONDS)
    new OutputFlusher.Registration(f)
  }

  /**
   * Runs `task` every `intervalMs` on the flusher's thread (the latency-marker timer uses it); the
   * task must be short. Stop it with the returned handle.
   */
  def every(intervalMs: Long)(task: () => Unit): OutputFlusher.Registration = {
    require(intervalMs > 0, s"a periodic task needs a positive interval, not $intervalMs")
    val r = new OutputFlusher.Surviving(s"A periodic task every ${intervalMs}ms", task)
    new OutputFlusher.Registration(executor.scheduleAtFixedRate(r, intervalMs, intervalMs, TimeUnit.MILLISECONDS))
  }

  /**
   * Runs `task` once, `delayNanos` from now, on the flusher's thread (deferred idle flushes of
   * pipelined partitions); the task must be short and must not throw. False when the flusher was
   * shut down.
   */
  def once(delayNanos: Long, task: Runnable): Boolean =
    try {
      executor.schedule(task, delayNanos, TimeUnit.NANOSECONDS)
      true
    } catch {
      case _: java.util.concurrent.RejectedExecutionException => false
    }

  def numRegistered: Int = executor.getQueue.size()

  def shutdown(): Unit = executor.shutdownNow()
}

object OutputFlusher {
  private val log = LoggerFactory.getLogger(classOf[OutputFlusher])

  /** Runs `body` at every tick, whatever it throws; only the first failure is logged. */
  private final class Surviving(what: String, body: () => Unit) extends Runnable {
    private var failed = false // the flusher's thread only

    override def run(): Unit =
      try body()
      catch {
        case NonFatal(e) =>
          if (!failed) log.warn(s"$what failed; it is retried at every tick, and further failures are not logged", e)
          failed = true
      }
  }

  final class Registration private[OutputFlusher] (future: ScheduledFuture[_]) {
    def cancel(): Unit = future.cancel(false)
  }
}
