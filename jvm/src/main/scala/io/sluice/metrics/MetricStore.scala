package io.sluice.metrics

import scala.collection.mutable

/** The latest report of one executor: when it came, its network memory, its totals and rates. Immutable. */
final case class ExecutorEntry(
    executorId: String,
    lastReportMillis: Long,
    segments: SegmentsSnapshot,
    totals: Map[String, Long] = Map.empty,
    rates: Map[String, Double] = Map.empty,
    transport: TransportSnapshot = TransportSnapshot.none)

/** The latest snapshot of one task attempt and the executor it ran on. Immutable. */
final case class TaskEntry(executorId: String, snapshot: TaskIOSnapshot) {
  def key: TaskKey = snapshot.key
}

/**
 * The driver's copy of every executor's network metrics (Flink's MetricStore behind the web UI):
 * the latest segments of each executor and the latest snapshot of each task attempt, keyed by
 * task attempt id. A finished snapshot is never replaced by an older running one. At most
 * `maxTasks` tasks are kept; finished ones go first, oldest first. Thread-safe.
 */
final class MetricStore(maxTasks: Int = MetricStore.DefaultMaxTasks) {

  private val executors = mutable.LinkedHashMap.empty[String, ExecutorEntry]
  private val tasks = mutable.LinkedHashMap.empty[Long, TaskEntry]

  def add(report: ExecutorSnapshot): Unit = synchronized {
    executors(report.executorId) =
      ExecutorEntry(report.executorId, report.timestampMillis, report.segments, report.totals, report.rates,
        report.transport)
    report.tasks.foreach { s =>
      val id = s.key.taskAttemptId
      tasks.get(id) match {
        case Some(old) if !old.snapshot.running && s.running => () // a late running sample of a finished task
        case Some(_) =>
          tasks(id) = TaskEntry(report.executorId, s)
        case None =>
          tasks(id) = TaskEntry(report.executorId, s)
      }
    }
    evictLocked()
  }

  /** The executor is gone: its segments are forgotten, its running tasks are marked ended. */
  def removeExecutor(executorId: String): Unit = synchronized {
    executors.remove(executorId)
    tasks.foreach { case (id, e) =>
      if (e.executorId == executorId && e.snapshot.running) tasks(id) = e.copy(snapshot = e.snapshot.copy(running = false))
    }
  }

  private def evictLocked(): Unit = if (tasks.size > maxTasks) {
    val finished = tasks.iterator.filter(!_._2.snapshot.running).map(_._1).take(tasks.size - maxTasks).toList
    finished.foreach(tasks.remove)
    while (tasks.size > maxTasks) tasks.remove(tasks.head._1)
  }

  def executorEntries: Seq[ExecutorEntry] = synchronized(executors.values.toSeq.sortBy(_.executorId))

  /** Executors that reported at or after `sinceMillis`. */
  def executorsSince(sinceMillis: Long): Set[String] =
    synchronized(executors.values.filter(_.lastReportMillis >= sinceMillis).map(_.executorId).toSet)

  def taskEntries: Seq[TaskEntry] = synchronized(tasks.values.toSeq)

  /** The latest snapshots of the tasks still running. */
  def runningTasks: Seq[TaskIOSnapshot] = synchronized(tasks.values.map(_.snapshot).filter(_.running).toSeq)

  def stageIds: Seq[Int] = synchronized(tasks.values.map(_.key.stageId).toSeq.distinct.sorted)

  /** The tasks of the latest attempt of `stageId` the store has heard of. */
  def tasksOf(stageId: Int): Seq[TaskEntry] = {
    val all = synchronized(tasks.values.filter(_.key.stageId == stageId).toSeq)
    if (all.isEmpty) all
    else {
      val attempt = all.map(_.key.stageAttemptId).max
      all.filter(_.key.stageAttemptId == attempt).sortBy(e => (e.key.partitionId, e.key.taskAttemptId))
    }
  }

  def numTasks: Int = synchronized(tasks.size)
}

object MetricStore {
  val DefaultMaxTasks = 20000
}
