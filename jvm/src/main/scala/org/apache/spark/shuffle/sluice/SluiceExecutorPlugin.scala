package org.apache.spark.shuffle.sluice

import java.util.{Map => JMap}
import java.util.concurrent.{
  ConcurrentHashMap, ConcurrentLinkedQueue, Executors, LinkedBlockingQueue, RejectedExecutionException, ScheduledExecutorService,
  ThreadPoolExecutor, TimeUnit
}
import java.util.concurrent.atomic.{AtomicBoolean, AtomicInteger}

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import com.codahale.metrics.MetricRegistry
import io.sluice.config.{SluiceConf, SluiceOptions}
import io.sluice.metrics.{
  BackPressureSampleService, ExecutorSnapshot, SampleRequest, SegmentsSnapshot, StageSampleResult, TaskKey
}
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.shuffle.sluice.metrics.{SluiceMetricsSource, SluiceTaskMetrics}
import org.apache.spark.shuffle.sluice.rpc.{ReportCodec, SluiceMessages}
import org.apache.spark.{TaskContext, TaskFailedReason}
import org.apache.spark.api.plugin.{ExecutorPlugin, PluginContext}
import org.apache.spark.internal.Logging

/**
 * The executor half of [[SluicePlugin]]. It starts the executor's Sluice network stack
 * ([[SluiceEnvironment]]) with the executor, as Spark starts its own block transfer service (where
 * Spark has not initialised the BlockManager yet, in local mode, the first task that needs it does),
 * and a [[ClassPreloader]], so that the first shuffle tasks pay for neither. From its own daemon
 * thread it sends a report to the driver at start, every spark.sluice.metrics.reportInterval and
 * soon after a task ends (at most one such extra report a quarter interval, so a stage that has
 * just finished reaches the driver before its application can end):
 * the executor's Sluice metrics (also published in Spark's metrics system as the source `sluice`,
 * [[SluiceMetricsSource]]), its Sluice server and the node shuffle service that serves its map
 * outputs, if any (for the Sluice tab); the replies name the servers its readers will read from
 * (peers' servers, or the node services that serve their outputs), to which it opens connections
 * ahead of its first reader, and the stages whose tasks the backpressure monitor
 * samples, on a second daemon thread, each run bounded in time.
 *
 * Task threads only touch a map of which thread runs which task (onTaskStart: TaskContext.get on
 * the task thread; onTaskSucceeded/onTaskFailed: removal) and schedule the extra report. Nothing here may fail a task or the
 * executor: every error is logged and the plugin carries on. Thread-safe.
 */
private[sluice] final class SluiceExecutorPlugin extends ExecutorPlugin with Logging {

  @volatile private var ctx: PluginContext = _
  @volatile private var conf: SluiceConf = SluiceConf.defaults
  @volatile private var source: SluiceMetricsSource = _
  private val registry = new MetricRegistry
  @volatile private var published: Option[SparkInternals.RegisteredSource] = None
  private var reporter: ScheduledExecutorService = _
  private var sampler: ThreadPoolExecutor = _
  private val sampleService = new BackPressureSampleService()
  private val taskThreads = new ConcurrentHashMap[Thread, TaskKey]()
  private val finishedSamples = new ConcurrentLinkedQueue[StageSampleResult]()
  private val failures = new AtomicInteger
  private val extraReportPending = new AtomicBoolean(false)
  @volatile private var lastReportNanos = 0L
  @volatile private var intervalMs = 0L
  @volatile private var preloader: Option[ClassPreloader] = None

  override def init(context: PluginContext, extraConf: JMap[String, String]): Unit =
    try start(context)
    catch {
      case NonFatal(e) => logWarning("Sluice's executor plugin could not start; this executor reports no metrics", e)
    }

  private def start(context: PluginContext): Unit = {
    ctx = context
    conf =
      try SluiceEnvironment.sluiceConf(context.conf())
      catch {
        case NonFatal(e) => logWarning(s"Sluice's plugin uses default settings: ${e.getMessage}"); SluiceConf.defaults
      }
    try {
      source = new SluiceMetricsSource(registry,
        new SluiceMetricsSource.ExecutorValues(() => SluiceEnvironment.ifStarted.map(_.metrics), conf))
      source.register()
      publish()
    } catch {
      case NonFatal(e) => logWarning("Could not register Sluice's metrics with Spark's metrics system", e)
    }
    reporter = Executors.newSingleThreadScheduledExecutor(daemon(s"sluice-metrics-reporter-${context.executorID()}"))
    sampler = new ThreadPoolExecutor(1, 1, 0L, TimeUnit.MILLISECONDS, new LinkedBlockingQueue[Runnable](),
      daemon(s"sluice-backpressure-sampler-${context.executorID()}"))
    startEnvironment(context)
    // The first report goes out at once: it announces this executor's server (and node service) to
    // the driver, whose replies name the servers to read from, to which it connects ahead of its first reader.
    intervalMs = conf.get(SluiceOptions.MetricsInterval)
    reporter.scheduleWithFixedDelay(() => report(), 0L, intervalMs, TimeUnit.MILLISECONDS)
    logInfo(s"Sluice's executor plugin reports network metrics every ${intervalMs}ms")
  }

  /**
   * Starts the network stack now, on the executor's start-up thread (as Spark starts its block
   * transfer service there), when Sluice is this application's shuffle manager and Spark has
   * initialised the executor's BlockManager. A failure is only logged: the first task that needs
   * the stack tries again and fails with the error.
   */
  private def startEnvironment(context: PluginContext): Unit =
    if (SluiceExecutorPlugin.usesSluice(context.conf())) {
      if (SparkInternals.isBlockManagerInitialized) {
        try SluiceEnvironment.get().setHostLocalRefresh(() => reportNow())
        catch {
          case NonFatal(e) => logWarning("Sluice's network stack did not start with the executor; its first " +
              s"shuffle task starts it: ${e.getMessage}")
        }
      }
      val p = ClassPreloader.forExecutor(context.executorID())
      p.start()
      preloader = Some(p)
    }

  override def onTaskStart(): Unit =
    try {
      val tc = TaskContext.get()
      if (tc != null) taskThreads.put(Thread.currentThread(), SluiceTaskMetrics.key(tc))
    } catch { case NonFatal(e) => logDebug("onTaskStart", e) }

  override def onTaskSucceeded(): Unit = taskEnded()

  override def onTaskFailed(reason: TaskFailedReason): Unit = taskEnded()

  /**
   * A task ended on this thread: when the executor then stays idle, its figures go to the driver
   * soon rather than at the next interval (an application may end within a second of its last
   * stage). An executor that starts its next task meanwhile waits for the regular reports, so a
   * stage of many short tasks adds no reports for the driver to handle.
   */
  private def taskEnded(): Unit = {
    taskThreads.remove(Thread.currentThread())
    if (taskThreads.isEmpty) reportSoon()
  }

  /**
   * An extra report once the executor has stayed idle for a tenth of the interval, and a quarter
   * interval after the last report started at the earliest; one pending at a time.
   */
  private def reportSoon(): Unit = {
    val r = reporter
    if (r != null && extraReportPending.compareAndSet(false, true)) {
      val sinceLastMs = (System.nanoTime() - lastReportNanos) / 1000000L
      val delayMs = math.max(intervalMs / 10, intervalMs / 4 - sinceLastMs)
      val ifIdle: Runnable = () => {
        extraReportPending.set(false)
        if (taskThreads.isEmpty) report()
      }
      try { r.schedule(ifIdle, delayMs, TimeUnit.MILLISECONDS); () }
      catch { case _: RejectedExecutionException => extraReportPending.set(false) }
    }
  }

  /**
   * Registers the metrics with Spark's metrics system once it can name them: at start on a
   * cluster's executor; in local mode, whose executor starts before the application id is known,
   * at a later report.
   */
  private def publish(): Unit = if (source != null && published.isEmpty) published = SluiceMetricsSource.publish(registry)

  /**
   * A report on the reporter thread now, waited for (at most RefreshTimeoutMs): a reader that meets
   * a new executor on this host learns its dirs from the reply.
   */
  private def reportNow(): Unit = {
    val r = reporter
    if (r != null) {
      try { r.submit((() => report()): Runnable).get(SluiceExecutorPlugin.RefreshTimeoutMs, TimeUnit.MILLISECONDS); () }
      catch {
        case _: InterruptedException => Thread.currentThread().interrupt()
        case NonFatal(e) => logDebug("A report for the dirs of this host's executors did not come back in time", e)
      }
    }
  }

  /** One report: tick the metrics, hand in finished samples, start the sampling the driver asks for. */
  private[sluice] def report(): Unit = {
    val c = ctx
    if (c == null) return
    lastReportNanos = System.nanoTime()
    try {
      if (source != null) {
        publish()
        source.registerLatencyIfTracked()
      }
      val env = SluiceEnvironment.ifStarted
      val snapshot = env.map(_.metrics.tick()).getOrElse(emptySnapshot(c.executorID()))
      val samples = Iterator.continually(finishedSamples.poll()).takeWhile(_ != null).toList
      val server = env.map(e => SluiceMessages.SluiceServer(c.executorID(), e.connectionManager.host, e.serverPort))
      val dirs = env.fold(Seq.empty[String])(_.partitionDirs.map(_.getAbsolutePath))
      c.ask(ReportCodec.encode(SluiceMessages.Report(snapshot, samples, server, env.flatMap(_.nodeService), dirs))) match {
        case bytes: Array[Byte] => ReportCodec.decode(bytes) match {
            case SluiceMessages.ReportReply(requests, servers, hostLocal) =>
              requests.foreach(startSampling)
              env.foreach { e =>
                servers.foreach(s => e.connectionManager.prepareConnection(s.host, s.port, s.node))
                hostLocal.foreach(h => e.addHostLocalExecutor(h.executorId, h.dirs.map(new java.io.File(_))))
              }
            case _ => ()
          }
        case _ => ()
      }
      failures.set(0)
    } catch {
      case _: InterruptedException => Thread.currentThread().interrupt()
      case NonFatal(e) =>
        // Keep reporting; say so once, then only at debug level until a report gets through.
        if (failures.getAndIncrement() == 0) logWarning(s"Could not report Sluice's metrics to the driver: $e")
        else logDebug("Sluice metrics report failed", e)
    }
  }

  private def emptySnapshot(executorId: String): ExecutorSnapshot = {
    val n = conf.numberOfSegments
    ExecutorSnapshot(executorId, System.currentTimeMillis(),
      SegmentsSnapshot(conf.segmentSize, n, n, 0), Nil)
  }

  /** Samples the stage's running tasks on the sampler thread; a full queue answers with nothing. */
  private def startSampling(request: SampleRequest): Unit = {
    val executorId = ctx.executorID()
    if (sampler.getQueue.size() >= SluiceExecutorPlugin.MaxQueuedSamplings) {
      finishedSamples.add(StageSampleResult(request.requestId, request.stageId, executorId, Nil))
      return
    }
    sampler.execute { () =>
      val tasks =
        try {
          val limit = request.numSamples.toLong * request.delayBetweenSamplesMs + SluiceExecutorPlugin.SamplingSlackMs
          sampleService.sample(() => tasksOf(request.stageId), request.numSamples, request.delayBetweenSamplesMs, limit)
        } catch {
          case NonFatal(e) => logWarning(s"Backpressure sampling of stage ${request.stageId} failed", e); Nil
        }
      finishedSamples.add(StageSampleResult(request.requestId, request.stageId, executorId, tasks))
    }
  }

  private def tasksOf(stageId: Int): Map[TaskKey, Thread] =
    taskThreads.asScala.iterator.collect { case (t, k) if k.stageId == stageId => k -> t }.toMap

  override def shutdown(): Unit = {
    preloader.foreach(_.stop(ClassPreloader.StopTimeoutMs))
    if (reporter != null) reporter.shutdownNow()
    if (sampler != null) sampler.shutdownNow()
    try published.foreach(_.remove())
    catch { case NonFatal(e) => logDebug("Removing Sluice's metrics", e) }
    published = None
    taskThreads.clear()
  }

  private def daemon(name: String): java.util.concurrent.ThreadFactory = (r: Runnable) => {
    val t = new Thread(r, name)
    t.setDaemon(true)
    t
  }
}

private[sluice] object SluiceExecutorPlugin {

  /** How long a reader waits for a report that names the dirs of a new executor on its host. */
  val RefreshTimeoutMs = 2000L

  /** Sampling requests that may wait for the sampler thread; beyond, an empty answer is sent. */
  val MaxQueuedSamplings = 8

  /** Time a sampling run may take beyond numSamples x delay. */
  val SamplingSlackMs = 2000L

  /** Whether `conf` makes one of Sluice's managers the shuffle manager (regular or pipelined). */
  def usesSluice(conf: org.apache.spark.SparkConf): Boolean =
    Seq("spark.shuffle.manager", "spark.shuffle.manager.incremental").exists(k =>
      conf.getOption(k).exists(_.startsWith(classOf[SluiceShuffleManager].getPackage.getName + ".")))
}
