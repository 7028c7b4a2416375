package io.sluice.metrics

import java.util.concurrent.CompletableFuture

import scala.collection.mutable

/**
 * The driver's half of the backpressure monitor (Flink's BackPressureStatsTracker with its
 * request coordinator): on request it asks every live executor to sample the running tasks of a
 * stage, collects their answers into a [[StageBackPressure]], and keeps that result for
 * `refreshIntervalMs` so repeated requests (UI refreshes) do not sample again.
 *
 * The driver cannot call executors, so requests wait here until each executor collects them with
 * [[requestsFor]] (in the reply to its periodic report), and answers arrive with later reports
 * ([[onResult]]). A request completes when every executor asked has answered, or at its deadline
 * with the answers it has. Thread-safe.
 *
 * @param answerSlackMs how long past the sampling time itself a request waits for answers
 */
final class BackPressureStatsTracker(
    numSamples: Int,
    delayBetweenSamplesMs: Long,
    refreshIntervalMs: Long,
    answerSlackMs: Long,
    clock: Clock = SystemClock,
    maxStages: Int = 1000) {

  private final class Pending(val request: SampleRequest, val deadlineMillis: Long, val asked: Set[String]) {
    val delivered = mutable.Set.empty[String]
    val answers = mutable.LinkedHashMap.empty[String, Seq[TaskSample]]
    val result = new CompletableFuture[StageBackPressure]()
  }

  private var nextRequestId = 1L
  private val pending = mutable.LinkedHashMap.empty[Long, Pending]
  private val inFlightByStage = mutable.Map.empty[Int, Pending]
  private val results = mutable.LinkedHashMap.empty[Int, StageBackPressure]

  /** How long one sampling round takes on an executor (the executor's time limit). */
  def samplingTimeMs: Long = numSamples.toLong * delayBetweenSamplesMs

  /**
   * The backpressure of `stageId`: the cached result when it is younger than the refresh interval
   * (unless `force`), the request already in flight for the stage, or a new request to
   * `executors`. With no executor to ask, the result is an empty (OK) one at once.
   */
  def request(stageId: Int, executors: Set[String], force: Boolean = false): CompletableFuture[StageBackPressure] = {
    val done = synchronized {
      expireLocked()
      val now = clock.currentTimeMillis()
      results.get(stageId) match {
        case Some(r) if !force && now - r.endTimestampMillis <= refreshIntervalMs =>
          Left(CompletableFuture.completedFuture(r))
        case _ =>
          inFlightByStage.get(stageId) match {
            case Some(p) => Left(p.result)
            case None =>
              val req = SampleRequest(nextRequestId, stageId, numSamples, delayBetweenSamplesMs)
              nextRequestId += 1
              val p = new Pending(req, now + samplingTimeMs + answerSlackMs, executors)
              if (executors.isEmpty) Right(complete(p))
              else {
                pending(req.requestId) = p
                inFlightByStage(stageId) = p
                Left(p.result)
              }
          }
      }
    }
    done match {
      case Left(f) => f
      case Right((p, r)) => p.result.complete(r); p.result
    }
  }

  /** The requests `executorId` has not collected yet; they count as delivered from now on. */
  def requestsFor(executorId: String): Seq[SampleRequest] = {
    val expired = synchronized {
      val e = expireLocked()
      val out = pending.values.filter(p => p.asked.contains(executorId) && !p.delivered.contains(executorId)).toSeq
      out.foreach(_.delivered += executorId)
      (e, out.map(_.request))
    }
    expired._1.foreach { case (p, r) => p.result.complete(r) }
    expired._2
  }

  /** An executor's samples for a request; completes the request when it was the last answer. */
  def onResult(result: StageSampleResult): Unit = {
    val completed = synchronized {
      pending.get(result.requestId) match {
        case Some(p) if p.asked.contains(result.executorId) =>
          p.answers(result.executorId) = result.tasks
          if (p.asked.forall(p.answers.contains)) Some(complete(p)) else None
        case _ => None
      }
    }
    completed.foreach { case (p, r) => p.result.complete(r) }
  }

  /** Completes overdue requests with the answers they have. */
  def expire(): Unit = {
    val e = synchronized(expireLocked())
    e.foreach { case (p, r) => p.result.complete(r) }
  }

  /** The last result of `stageId`, however old. */
  def latest(stageId: Int): Option[StageBackPressure] = synchronized(results.get(stageId))

  def isInFlight(stageId: Int): Boolean = synchronized(inFlightByStage.contains(stageId))

  private def expireLocked(): Seq[(Pending, StageBackPressure)] = {
    val now = clock.currentTimeMillis()
    pending.values.filter(_.deadlineMillis <= now).toList.map(complete)
  }

  /** Builds the result of `p` and forgets the request (lock held); the caller completes the future. */
  private def complete(p: Pending): (Pending, StageBackPressure) = {
    pending.remove(p.request.requestId)
    if (inFlightByStage.get(p.request.stageId).contains(p)) inFlightByStage.remove(p.request.stageId)
    val tasks = p.answers.iterator.flatMap { case (exec, samples) => samples.map(TaskBackPressure(exec, _)) }.toSeq
      .sortBy(t => (t.sample.key.partitionId, t.sample.key.taskAttemptId))
    val r = StageBackPressure(p.request.stageId, p.request.requestId, clock.currentTimeMillis(), tasks,
      p.asked.size, p.answers.size)
    results.remove(r.stageId)
    results(r.stageId) = r
    while (results.size > maxStages) results.remove(results.head._1)
    (p, r)
  }
}
