package org.apache.spark.shuffle.sluice.metrics

import java.util.concurrent.{CompletableFuture, TimeUnit}

import scala.util.control.NonFatal

import io.sluice.NodeServiceAddress
import io.sluice.config.{SluiceConf, SluiceOptions}
import io.sluice.metrics._
import io.sluice.partition.ResultPartitionType
import org.apache.spark.internal.Logging
import org.apache.spark.shuffle.sluice.SluiceExecutorPlugin
import org.apache.spark.shuffle.sluice.rpc.SluiceMessages

/**
 * One stage as the Sluice tab, its JSON and Python show it: Spark's view of the stage, its tasks'
 * latest network metrics, the last backpressure sample and the root-cause diagnosis of a pipelined
 * stage, or the batch diagnosis of a batch one (`batch`; None for pipelined stages and for stages
 * without Sluice metrics yet). Immutable.
 */
private[sluice] final case class StageView(
    stageId: Int,
    meta: Option[StageMeta],
    tasks: Seq[TaskEntry],
    backPressure: Option[StageBackPressure],
    sampling: Boolean,
    diagnosis: NetworkDiagnosis.Diagnosis,
    batch: Option[BatchDiagnosis.Result] = None) {

  private def sum(f: TaskIOSnapshot => Long): Long = tasks.iterator.map(e => f(e.snapshot)).sum
  private def max(f: TaskIOSnapshot => Double): Double = tasks.iterator.map(e => f(e.snapshot)).maxOption.getOrElse(0.0)

  def attemptId: Int = meta.map(_.attemptId).orElse(tasks.headOption.map(_.key.stageAttemptId)).getOrElse(0)
  def name: String = meta.map(_.name).getOrElse("")
  def status: String = meta.map(_.status).getOrElse(if (tasks.exists(_.snapshot.running)) StageMeta.Active else "")
  def runningTasks: Int = tasks.count(_.snapshot.running)
  def numRecordsOut: Long = sum(_.numRecordsOut)
  def numRecordsIn: Long = sum(_.numRecordsIn)
  def numBytesOut: Long = sum(_.numBytesOut)
  def numBytesIn: Long = sum(_.numBytesIn)
  def numBytesInLocal: Long = sum(_.numBytesInLocal)
  def numBytesInRemote: Long = sum(_.numBytesInRemote)
  def numBuffersOut: Long = sum(_.numBuffersOut)
  def numBuffersInLocal: Long = sum(_.numBuffersInLocal)
  def numBuffersInRemote: Long = sum(_.numBuffersInRemote)
  def outPoolUsage: Double = max(_.outPoolUsage)
  def inPoolUsage: Double = max(_.inPoolUsage)
  def floatingBuffersUsage: Double = max(_.floatingBuffersUsage)
  def exclusiveBuffersUsage: Double = max(_.exclusiveBuffersUsage)
  def backPressuredTimeMsPerSecond: Double = max(_.backPressuredTimeMsPerSecond)

  /** The backpressure sentence of a pipelined stage; for a batch stage, that it does not apply. */
  def rootCause: String = batch.fold(diagnosis.rootCause)(_ => StageView.NotPipelined)
  def ratio: Double = backPressure.map(_.ratio).getOrElse(0.0)
  def level: BackPressureLevel = BackPressureLevel.of(ratio)
}

private[sluice] object StageView {
  val NotPipelined: String = "Backpressure does not apply: this stage's shuffles are blocking (see the batch diagnosis)."
}

/**
 * The driver's side of Sluice's observability (owned by the driver plugin): the [[MetricStore]]
 * the executors' reports fill, the backpressure monitor's [[BackPressureStatsTracker]], Spark's
 * stage events, and the stage views built from them for the UI tab, its JSON and Python.
 * `blockingThroughSluice`: spark.shuffle.manager is Sluice's, so every stage Spark saw shuffle
 * (read or write) shuffled through Sluice. Thread-safe.
 */
private[sluice] final class SluiceDriverMetrics(val conf: SluiceConf, val blockingThroughSluice: Boolean = true)
  extends Logging {

  val reportIntervalMs: Long = conf.get(SluiceOptions.MetricsInterval)
  val store = new MetricStore()
  val stages = new SluiceStageListener(store)
  val tracker = new BackPressureStatsTracker(
    conf.get(SluiceOptions.BackpressureNumSamples),
    conf.get(SluiceOptions.BackpressureDelay),
    conf.get(SluiceOptions.BackpressureRefreshInterval),
    answerSlackMs = 3 * reportIntervalMs + SluiceExecutorPlugin.SamplingSlackMs + 2000L)

  private val reportCounts = scala.collection.mutable.Map.empty[String, Long] // guarded by this

  /** Executor id -> the node shuffle service its last report named, for executors whose outputs one serves. */
  private val servedBy = new java.util.concurrent.ConcurrentHashMap[String, NodeServiceAddress]()

  /** Handles an executor's report; the reply carries the sampling requests it has not seen. */
  def onReport(report: SluiceMessages.Report): SluiceMessages.ReportReply = {
    val executorId = report.snapshot.executorId
    try {
      store.add(report.snapshot.copy(timestampMillis = System.currentTimeMillis()))
      report.samples.foreach(tracker.onResult)
      if (report.server.isDefined) report.nodeService match { // the environment runs: it knows who serves its outputs
        case Some(s) => servedBy.put(executorId, s)
        case None => servedBy.remove(executorId)
      }
    } catch {
      case NonFatal(e) => logWarning(s"Could not take Sluice's metrics report of executor $executorId", e)
    }
    synchronized {
      reportCounts(executorId) = reportCounts.getOrElse(executorId, 0L) + 1
      notifyAll()
    }
    SluiceMessages.ReportReply(try tracker.requestsFor(executorId)
      catch { case NonFatal(_) => Nil })
  }

  /** Executor id -> the node shuffle service serving its map outputs, as its reports said (gone executors too). */
  def nodeServedExecutors: Map[String, NodeServiceAddress] = {
    import scala.jdk.CollectionConverters._
    servedBy.asScala.toMap
  }

  /** Executors heard from within the last few report intervals. */
  def liveExecutors: Set[String] = store.executorsSince(System.currentTimeMillis() - 3 * reportIntervalMs - 1000L)

  /**
   * Waits until every live executor has sent two more reports, so everything its tasks did
   * before this call is in the store (the second report's tick starts after the first one's
   * reply, which the driver sent after this call). Gives up after `timeoutMs`.
   */
  def awaitFreshReports(timeoutMs: Long): Boolean = {
    val deadline = System.nanoTime() + timeoutMs * 1000000L
    val targets = synchronized(liveExecutors.map(e => e -> (reportCounts.getOrElse(e, 0L) + 2)).toMap)
    synchronized {
      var done = targets.forall { case (e, n) => reportCounts.getOrElse(e, 0L) >= n }
      while (!done && System.nanoTime() < deadline) {
        wait(math.max(1L, (deadline - System.nanoTime()) / 1000000L))
        done = targets.forall { case (e, n) => reportCounts.getOrElse(e, 0L) >= n }
      }
      done
    }
  }

  /** Every stage Sluice has metrics of or Spark reports as running, newest first. */
  def stageIds: Seq[Int] = (store.stageIds ++ stages.activeStageIds).distinct.sorted.reverse

  def stageView(stageId: Int): StageView = stageView(stageId, store.tasksOf, stages.tasksOf)

  /**
   * As [[stageView]], reading Sluice's tasks of a stage (its own, and its parents') through
   * `sluiceTasks` and Spark's through `sparkTasks`: a caller viewing many stages passes memoised
   * readers, so each stage's tasks are read once whether it is viewed or a parent of one viewed.
   */
  def stageView(stageId: Int, sluiceTasks: Int => Seq[TaskEntry], sparkTasks: Int => Seq[SparkTaskFigures]): StageView = {
    val meta = stages.stage(stageId)
    val tasks = sluiceTasks(stageId)
    val upstream = meta.map(_.parentIds).getOrElse(Nil).flatMap(sluiceTasks).map(_.snapshot)
    val timeout = conf.get(SluiceOptions.BufferTimeout)
    val sample = tracker.latest(stageId)
    val sampledBlocked = sample.exists(s => BackPressureLevel.of(s.ratio) == BackPressureLevel.High)
    val diagnosis = NetworkDiagnosis.diagnose(tasks.map(_.snapshot), upstream, timeout, conf.segmentSize, sampledBlocked)
    val pipelined = (tasks.map(_.snapshot) ++ upstream).exists(_.outputType == ResultPartitionType.Pipelined.name)
    val batch = if (pipelined || tasks.isEmpty) None else Some(batchDiagnosis(sparkTasks(stageId), tasks))
    StageView(stageId, meta, tasks, sample, tracker.isInFlight(stageId), diagnosis, batch)
  }

  /** Spark's metrics of the stage's successful tasks joined with their waits Sluice measured. */
  private def batchDiagnosis(spark: Seq[SparkTaskFigures], tasks: Seq[TaskEntry]): BatchDiagnosis.Result = {
    val sluice = tasks.iterator.map(e => e.key.taskAttemptId -> e.snapshot).toMap
    BatchDiagnosis.diagnose(spark.map { t =>
      val s = sluice.get(t.taskAttemptId)
      BatchDiagnosis.Task(t.partitionId, t.executorId, t.executorRunTimeMs, t.fetchWaitMs, t.shuffleBytesRead,
        t.shuffleRecordsRead, t.spillBytes, s.fold(0L)(_.bufferWaitMs), s.fold(Map.empty[String, Long])(_.inputWaitByProducerMs))
    })
  }

  def stageViews: Seq[StageView] = stageIds.map(stageView(_))

  def isRunning(stageId: Int): Boolean =
    stages.stage(stageId).exists(_.isActive) || store.tasksOf(stageId).exists(_.snapshot.running)

  /** Starts sampling every running stage (the UI does this when rendered; results come later). */
  def requestRunningStages(): Unit = stageIds.filter(isRunning).foreach { id =>
    try tracker.request(id, liveExecutors)
    catch { case NonFatal(e) => logDebug(s"sampling stage $id", e) }
  }

  /**
   * The backpressure of `stageIds` (all known stages when empty): running stages are sampled
   * (or their fresh cached sample is used), waiting up to `timeoutMs` for the executors' answers;
   * stages that no longer run keep their last sample, if any.
   */
  def backPressure(stageIds: Seq[Int], timeoutMs: Long): Seq[StageView] = {
    val ids = if (stageIds.isEmpty) this.stageIds else stageIds
    val executors = liveExecutors
    val futures: Seq[CompletableFuture[StageBackPressure]] =
      ids.filter(isRunning).map(id => tracker.request(id, executors))
    val deadline = System.nanoTime() + timeoutMs * 1000000L
    futures.foreach { f =>
      val left = (deadline - System.nanoTime()) / 1000000L
      try if (left > 0) f.get(left, TimeUnit.MILLISECONDS)
      catch { case NonFatal(_) => () }
    }
    tracker.expire()
    ids.map(stageView(_))
  }

  /** How long a backpressure request may take: the sampling plus the executors' round trips. */
  def backPressureTimeoutMs: Long = tracker.samplingTimeMs + 3 * reportIntervalMs + SluiceExecutorPlugin.SamplingSlackMs + 3000L
}

/** The running application's [[SluiceDriverMetrics]], for the UI tab and the Python accessor. */
private[sluice] object SluiceDriverMetrics {
  @volatile private var current: SluiceDriverMetrics = _

  def get: Option[SluiceDriverMetrics] = Option(current)

  def set(m: SluiceDriverMetrics): Unit = current = m

  def clear(m: SluiceDriverMetrics): Unit = synchronized { if (current eq m) current = null }
}
