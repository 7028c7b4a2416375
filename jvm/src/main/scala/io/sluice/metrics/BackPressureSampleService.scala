package io.sluice.metrics

/**
 * Samples the stack traces of running task threads and counts the samples in which a task was
 * blocked on a buffer request (Flink's BackPressureSampleService / stack-trace sampling of the
 * back-pressure monitor): a frame of LocalBufferPool.requestBufferBlocking (the pool has no free
 * buffer) or PipelinedSubpartition.awaitRoom (the consumer's queue is full). The sampling thread
 * is the caller's; a call takes about numSamples x delay and never longer than its time limit.
 * Thread-safe (stateless apart from its frame list).
 */
final class BackPressureSampleService(
    blockingFrames: Seq[(String, String)] = BackPressureSampleService.BlockingFrames,
    sleep: Long => Unit = ms => Thread.sleep(ms)) {

  /** Whether a stack trace shows a thread waiting for an output buffer. */
  def isBackPressured(trace: Array[StackTraceElement]): Boolean = {
    var i = 0
    while (i < trace.length) {
      val f = trace(i)
      var j = 0
      while (j < blockingFrames.length) {
        val (cls, method) = blockingFrames(j)
        if (f.getMethodName == method && f.getClassName == cls) return true
        j += 1
      }
      i += 1
    }
    false
  }

  /**
   * Takes up to `numSamples` rounds of samples, `delayMs` apart, of the threads `tasks()` names at
   * each round (a task that ended drops out; its samples so far count), stopping early once
   * `timeLimitMs` has passed. Returns one [[TaskSample]] per task seen.
   */
  def sample(tasks: () => Map[TaskKey, Thread], numSamples: Int, delayMs: Long, timeLimitMs: Long): Seq[TaskSample] = {
    val deadline = System.nanoTime() + timeLimitMs * 1000000L
    val blocked = scala.collection.mutable.LinkedHashMap.empty[TaskKey, (Int, Int)]
    var round = 0
    while (round < numSamples && System.nanoTime() < deadline) {
      tasks().foreach { case (key, thread) =>
        if (thread.isAlive) {
          val b = isBackPressured(thread.getStackTrace)
          val (nb, nt) = blocked.getOrElse(key, (0, 0))
          blocked(key) = (nb + (if (b) 1 else 0), nt + 1)
        }
      }
      round += 1
      if (round < numSamples) {
        val left = (deadline - System.nanoTime()) / 1000000L
        if (left > 0) sleep(math.min(delayMs, left))
      }
    }
    blocked.iterator.map { case (k, (b, t)) => TaskSample(k, b, t) }.toSeq
  }
}

object BackPressureSampleService {

  /** (class, method) of the frames that mean "waiting for an output buffer". */
  val BlockingFrames: Seq[(String, String)] = Seq(
    "io.sluice.memory.LocalBufferPool" -> "requestBufferBlocking",
    "io.sluice.partition.PipelinedSubpartition" -> "awaitRoom")
}
