package io.sluice.metrics

/**
 * Where a batch (blocking-shuffle) stage's time went, and one sentence naming the likely cause:
 * fetch wait against run time, waits for network buffers, the producing executor whose channels
 * the readers waited on longest, the largest reduce partition against the median, a straggling
 * executor, and spill. Beyond Flink (whose blocking shuffles have no such view) and Spark; the
 * thresholds are documented in `docs/metrics.md`. Pure functions.
 */
object BatchDiagnosis {

  /** Waits for network buffers above this share of the run time are the cause. */
  val BufferWaitShare = 0.1

  /** Fetch wait above this share of the run time makes a stage network-bound ... */
  val FetchWaitShare = 0.3

  /**
   * ... when it is at least this much per task on average: short tasks wait tens of ms for their
   * first buffers (connection, partition request, the producer's first disk read) even on loopback.
   */
  val MinFetchWaitPerTaskMs = 500L

  /** A producing executor is slow when it got at least this share of the input wait ... */
  val ProducerWaitShare = 0.5

  /** ... and at least this many times its fair share (one over the producing executors). */
  val ProducerWaitOverFair = 1.5

  /** A reduce partition is skewed when it read at least this many times the median ... */
  val SkewOverMedian = 4.0

  /** ... and at least this many bytes. */
  val SkewMinBytes: Long = 1L << 20

  /** An executor straggles when its tasks' time per record (or per task) is this many times the others'. */
  val SlowExecutorRatio = 3.0

  /** Waits and run-time differences below this many ms are never a cause (noise of short stages). */
  val MinMs = 200L

  /** Spill of at least this share of the bytes read is named. */
  val SpillShare = 0.25

  /** One finished task attempt of the stage: Spark's task metrics and Sluice's waits. */
  final case class Task(
      partitionId: Int,
      executorId: String,
      runTimeMs: Long,
      fetchWaitMs: Long,
      bytesRead: Long,
      recordsRead: Long,
      spillBytes: Long,
      bufferWaitMs: Long,
      inputWaitByProducerMs: Map[String, Long])

  /** What [[diagnose]] found; the named partition and executors are -1 / "" when none stands out. */
  final case class Result(
      cause: String,
      tasks: Int,
      runTimeMs: Long,
      fetchWaitMs: Long,
      bufferWaitMs: Long,
      spillBytes: Long,
      maxPartitionId: Int,
      maxPartitionBytes: Long,
      medianPartitionBytes: Long,
      slowProducer: String,
      slowProducerWaitMs: Long,
      slowExecutor: String,
      slowExecutorRatio: Double) {
    def fetchWaitShare: Double = share(fetchWaitMs, runTimeMs)
    def skewRatio: Double = if (medianPartitionBytes <= 0) 0.0 else maxPartitionBytes.toDouble / medianPartitionBytes
  }

  val NoTasks = "No finished tasks yet."

  val empty: Result = Result(NoTasks, 0, 0, 0, 0, 0, -1, 0, 0, "", 0, "", 0.0)

  private def share(part: Long, whole: Long): Double = if (whole <= 0) 0.0 else part.toDouble / whole
  private def pct(v: Double): String = f"${v * 100}%.0f %%"
  private def mb(b: Long): String = f"${b / 1048576.0}%.1f MiB"

  private def median(vs: Seq[Double]): Double = {
    val s = vs.sorted
    if (s.isEmpty) 0.0 else if (s.size % 2 == 1) s(s.size / 2) else (s(s.size / 2 - 1) + s(s.size / 2)) / 2
  }

  /** Diagnoses a stage from its tasks (one attempt per partition: the latest). */
  def diagnose(tasks: Seq[Task]): Result = {
    if (tasks.isEmpty) return empty
    val run = tasks.map(_.runTimeMs).sum
    val fetch = tasks.map(_.fetchWaitMs).sum
    val bufferWait = tasks.map(_.bufferWaitMs).sum
    val spill = tasks.map(_.spillBytes).sum
    val read = tasks.map(_.bytesRead).sum
    val readers = tasks.filter(_.bytesRead > 0)
    val largest = if (readers.isEmpty) None else Some(readers.maxBy(_.bytesRead))
    val medianBytes = median(readers.map(_.bytesRead.toDouble)).toLong
    val networkBound = fetch >= MinFetchWaitPerTaskMs * tasks.size && share(fetch, run) >= FetchWaitShare
    val (producer, producerWait) = if (networkBound) slowProducer(tasks) else ("", 0L)
    val (slowExec, slowRatio) = slowExecutor(tasks)
    val base = Result("", tasks.size, run, fetch, bufferWait, spill, largest.fold(-1)(_.partitionId),
      largest.fold(0L)(_.bytesRead), medianBytes, producer, producerWait, slowExec, slowRatio)
    base.copy(cause = cause(base, read, readers.size, networkBound))
  }

  /**
   * The producing executor the readers waited on for most of their input wait, when the stage is
   * network-bound and that executor took well over its fair share of the wait.
   */
  private def slowProducer(tasks: Seq[Task]): (String, Long) = {
    val waits = tasks.flatMap(_.inputWaitByProducerMs).groupMapReduce(_._1)(_._2)(_ + _)
    val total = waits.values.sum
    if (waits.size < 2 || total < MinMs) ("", 0L)
    else {
      val (exec, ms) = waits.maxBy(_._2)
      val s = share(ms, total)
      if (s >= ProducerWaitShare && s >= ProducerWaitOverFair / waits.size) (exec, ms) else ("", 0L)
    }
  }

  /**
   * The executor whose tasks took the longest per record read (per task when they read nothing),
   * when it is [[SlowExecutorRatio]] times the median of the other executors' and that costs at
   * least [[MinMs]] per task.
   */
  private def slowExecutor(tasks: Seq[Task]): (String, Double) = {
    val byExec = tasks.groupBy(_.executorId)
    if (byExec.size < 2) return ("", 0.0)
    val perRecord = tasks.forall(_.recordsRead > 0)
    def cost(ts: Seq[Task]): Double =
      if (perRecord) ts.map(_.runTimeMs).sum.toDouble / ts.map(_.recordsRead).sum
      else ts.map(_.runTimeMs).sum.toDouble / ts.size
    val costs = byExec.map { case (e, ts) => e -> cost(ts) }
    val (worst, c) = costs.maxBy(_._2)
    val others = median(costs.filter(_._1 != worst).values.toSeq)
    val worstTasks = byExec(worst)
    val extraPerTask = worstTasks.map(_.runTimeMs).sum.toDouble / worstTasks.size -
      (if (perRecord) others * worstTasks.map(_.recordsRead).sum / worstTasks.size else others)
    if (others > 0 && c / others >= SlowExecutorRatio && extraPerTask >= MinMs) (worst, c / others)
    else ("", 0.0)
  }

  private def cause(r: Result, bytesRead: Long, numReaders: Int, networkBound: Boolean): String = {
    val fetchShare = r.fetchWaitShare
    val bufferShare = share(r.bufferWaitMs, r.runTimeMs)
    val skewed = numReaders >= 3 && r.maxPartitionBytes >= SkewMinBytes && r.skewRatio >= SkewOverMedian
    if (r.bufferWaitMs >= MinMs && bufferShare >= BufferWaitShare) {
      s"Waits for network buffers: tasks waited ${r.bufferWaitMs} ms (${pct(bufferShare)} of their run time) for " +
      "the executor's network memory; raise spark.sluice.network.memory or run fewer tasks per executor."
    } else if (r.slowProducer.nonEmpty) {
      s"A slow or overloaded peer: reduce tasks waited ${pct(fetchShare)} of their run time for input, " +
      s"${r.slowProducerWaitMs} ms of it for executor ${r.slowProducer}'s map outputs; look at that executor's " +
      "load, disks and network link."
    } else if (skewed) {
      f"Skew: reduce partition ${r.maxPartitionId} read ${mb(r.maxPartitionBytes)}, ${r.skewRatio}%.1f× the " +
      s"median partition (${mb(r.medianPartitionBytes)}); split or salt its heavy keys, or let AQE split it " +
      "(spark.sql.adaptive.skewJoin.enabled)."
    } else if (r.slowExecutor.nonEmpty) {
      f"A slow executor: tasks on executor ${r.slowExecutor} were ${r.slowExecutorRatio}%.1f× slower than on the " +
      "others (run time per record read); " +
      "look at its load (CPU, GC, other processes) and its machine."
    } else if (networkBound) {
      s"Network-bound: tasks waited ${pct(fetchShare)} of their run time for input, spread over every " +
      "producing executor; look at the network links and at the map stage's output size."
    } else if (bytesRead > 0 && r.spillBytes >= SpillShare * bytesRead && r.spillBytes >= SkewMinBytes) {
      s"Spill: tasks spilled ${mb(r.spillBytes)} to disk against ${mb(bytesRead)} read; give executors more " +
      "memory or use more partitions."
    } else {
      s"No single cause: compute-bound (fetch wait ${pct(fetchShare)} of the run time, no skewed partition, " +
      "no slow executor, no waits for network buffers)."
    }
  }
}
