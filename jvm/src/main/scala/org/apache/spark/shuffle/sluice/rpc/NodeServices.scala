package org.apache.spark.shuffle.sluice.rpc

import java.util.concurrent.{
  ConcurrentHashMap, CountDownLatch, Executors, ScheduledExecutorService, ScheduledFuture, SynchronousQueue, ThreadPoolExecutor,
  TimeUnit
}

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.sluice.NodeServiceAddress
import io.sluice.service.ShuffleServiceClient
import org.apache.spark.internal.Logging
import org.apache.spark.shuffle.sluice.internal.SparkInternals

/**
 * The driver's list of the node shuffle services that hold the application's map outputs, as its
 * executors announce them when they register, and what the driver tells them: that the
 * application is alive (at once, then every 30 s, or a third of the service's timeout), which shuffle Spark
 * dropped, and that the application ended (the role Spark's BlockManagerMaster plays towards its
 * external shuffle services). It also keeps each service's last status for the Sluice tab, asked
 * with every heartbeat and when the tab is shown. A service that answers a heartbeat without
 * knowing the application (it restarted without a recovery dir) gets every announced executor's
 * dirs registered again, so the outputs already written there, and those to come, are served.
 *
 * Each service has a lane of its own ([[NodeServices.Lane]]): its messages go one after another,
 * in order, on a thread of a shared pool, so a service that hangs (its node gone, its link cut)
 * delays only its own messages, never another service's heartbeat (which would otherwise expire
 * the live application there and delete its files) or the application's end. A heartbeat or
 * status request is skipped for a service whose previous message is still under way, so a hung
 * service holds one thread at most. Messages from executors travel as [[RpcPayload]] bytes to one
 * driver endpoint. One instance per application, owned by
 * [[org.apache.spark.shuffle.sluice.SluiceShuffleDriverComponents]]; thread-safe (Spark's RPC
 * threads, the ContextCleaner's, its own timer thread and message threads).
 *
 * @param stopWaitMs how long [[stop]] (and a blocking [[removeShuffle]]) waits for the services'
 *                   answers; a service not told by then removes the application after its
 *                   spark.sluice.service.applicationTimeout
 */
private[sluice] final class NodeServices(client: () => ShuffleServiceClient,
    stopWaitMs: Long = NodeServices.StopWaitMs) extends Logging {

  private val lanes = new ConcurrentHashMap[NodeServiceAddress, NodeServices.Lane]()
  // service -> executor -> the dirs it registered there, kept after the executor is gone (its outputs stay)
  private val registered = new ConcurrentHashMap[NodeServiceAddress, ConcurrentHashMap[String, Seq[String]]]()

  /** What registering again at a service last failed with: the same failure at the next heartbeat is not warned again. */
  private val registerAgainFailed = new ConcurrentHashMap[NodeServiceAddress, String]()
  private val statuses = new ConcurrentHashMap[NodeServiceAddress, NodeServices.LastStatus]()
  @volatile private var lastRefreshMs = 0L
  @volatile private var intervalMs = ShuffleServiceClient.aliveIntervalMs(0L)
  @volatile private var stopped = false
  private val timer: ScheduledExecutorService = Executors.newSingleThreadScheduledExecutor { r =>
    val t = new Thread(r, "sluice-node-services")
    t.setDaemon(true)
    t
  }
  // A thread per service with a message under way, and only while it is (Executors.newCachedThreadPool's policy).
  private val messengers = new ThreadPoolExecutor(0, Int.MaxValue, 30L, TimeUnit.SECONDS, new SynchronousQueue[Runnable](),
    { (r: Runnable) =>
      val t = new Thread(r, s"sluice-node-services-message-${NodeServices.threadIds.incrementAndGet()}")
      t.setDaemon(true)
      t
    })
  private var nextHeartbeat: ScheduledFuture[_] = _ // guarded by this
  scheduleHeartbeat()

  /** Executor `executorId` registered `dirs` with `service` (Spark's RPC thread). */
  def announced(service: NodeServiceAddress, executorId: String, dirs: Seq[String]): Unit = {
    registered.computeIfAbsent(service, _ => new ConcurrentHashMap[String, Seq[String]]()).put(executorId, dirs)
    var added = false
    val lane = lanes.computeIfAbsent(service, _ => { added = true; new NodeServices.Lane(messengers) })
    if (added) {
      logInfo(s"The Sluice shuffle service at ${service.host}:${service.port} serves map outputs of this application")
      lane.offer(() => tell(service)(beat(_, service)), skippable = false)
    }
  }

  /** The services known now. */
  def known: Set[NodeServiceAddress] = lanes.keySet.asScala.toSet

  /** Each service's last status (JSON, see the service's `Status`) and when it came. */
  def lastStatuses: Map[NodeServiceAddress, NodeServices.LastStatus] = statuses.asScala.toMap

  /**
   * Asks every service for its status now, on its lane (the Sluice tab does when shown, so its
   * next view is fresh): at most once a second, never waiting here.
   */
  def refreshStatuses(): Unit = {
    val now = System.currentTimeMillis()
    if (!stopped && now - lastRefreshMs >= NodeServices.MinRefreshIntervalMs) {
      lastRefreshMs = now
      eachLane((s, lane) => lane.offer(() => tell(s)(takeStatus(_, s)), skippable = true))
    }
  }

  private def takeStatus(c: ShuffleServiceClient, s: NodeServiceAddress): Unit =
    statuses.put(s, NodeServices.LastStatus(c.status(s.host, s.port), System.currentTimeMillis()))

  /**
   * Spark dropped shuffle `shuffleId`: every service deletes its files; when `blocking`, this waits
   * for their answers (up to `stopWaitMs`).
   */
  def removeShuffle(shuffleId: Int, blocking: Boolean): Unit =
    if (!stopped) {
      val pending = onEachLane(s => tell(s)(_.removeShuffle(s.host, s.port, shuffleId)))
      if (blocking) await(pending, s"shuffle $shuffleId's removal")
    }

  /**
   * The application ends: every service is told to delete what it holds of it, each on its own
   * lane; this waits for their answers (up to `stopWaitMs`), then the timer, the message threads
   * and the client stop.
   */
  def stop(): Unit = if (!stopped) {
    stopped = true
    timer.shutdownNow()
    val pending = onEachLane(removeApplication)
    try await(pending, "the application's removal")
    finally {
      messengers.shutdownNow()
      try client().close()
      catch { case NonFatal(e) => logDebug("Closing the node service client", e) }
    }
  }

  /** Runs `message` for every service on its lane; each service's latch, counted down once its message is done. */
  private def onEachLane(message: NodeServiceAddress => Unit): Seq[(NodeServiceAddress, CountDownLatch)] = {
    val pending = Seq.newBuilder[(NodeServiceAddress, CountDownLatch)]
    eachLane { (s, lane) =>
      val done = new CountDownLatch(1)
      if (lane.offer(() =>
            try message(s)
            finally done.countDown(), skippable = false)) pending += s -> done
    }
    pending.result()
  }

  /** Waits (up to `stopWaitMs` in all) for every latch; names the services whose answers did not come. */
  private def await(pending: Seq[(NodeServiceAddress, CountDownLatch)], what: String): Unit = {
    val deadline = System.nanoTime() + stopWaitMs * 1000000L
    val late = pending.filterNot { case (_, done) =>
      try done.await(math.max(0L, deadline - System.nanoTime()), TimeUnit.NANOSECONDS)
      catch { case _: InterruptedException => Thread.currentThread().interrupt(); false }
    }
    if (late.nonEmpty) {
      logWarning(s"No answer within ${stopWaitMs}ms about $what from the Sluice shuffle services at " +
        late.map { case (s, _) => s"${s.host}:${s.port}" }.mkString(", ") + s": their files stay until they answer, " +
        s"or until the service's ${io.sluice.config.ServiceOptions.ServiceApplicationTimeout.key}")
    }
  }

  private def eachLane(f: (NodeServiceAddress, NodeServices.Lane) => Unit): Unit =
    lanes.forEach((s, lane) => f(s, lane))

  /**
   * Tells `s` the application ended, again after a failure (a service whose link just came back
   * may break the first request), at most [[NodeServices.RemoveAttempts]] times; after that its files
   * stay until the service's spark.sluice.service.applicationTimeout.
   */
  private def removeApplication(s: NodeServiceAddress): Unit =
    try {
      ShuffleServiceClient.attempting(NodeServices.RemoveAttempts, NodeServices.RemoveRetryWaitMs * _) { (attempt, e) =>
        logInfo(s"Telling the Sluice shuffle service at ${s.host}:${s.port} that the application ended " +
          s"(attempt $attempt of ${NodeServices.RemoveAttempts}): ${e.getMessage}; trying again")
      }(client().removeApplication(s.host, s.port))
    } catch {
      case NonFatal(e) =>
        logWarning(s"The Sluice shuffle service at ${s.host}:${s.port} was not told that the application ended " +
          s"(${NodeServices.RemoveAttempts} attempts): ${e.getMessage}; its files there go after the service's " +
          s"${io.sluice.config.ServiceOptions.ServiceApplicationTimeout.key}")
    }

  /** Says the application is alive to every service whose lane is free (timer thread), and schedules the next round. */
  private def heartbeat(): Unit = if (!stopped) {
    try eachLane((s, lane) => lane.offer(() => tell(s)(beat(_, s)), skippable = true))
    finally scheduleHeartbeat()
  }

  private def scheduleHeartbeat(): Unit = synchronized {
    if (!stopped) {
      try nextHeartbeat = timer.schedule((() => heartbeat()): Runnable, intervalMs, TimeUnit.MILLISECONDS)
      catch { case NonFatal(_) => () } // stopping
    }
  }

  /**
   * One service's heartbeat (its lane): alive, registered again if it forgot the application, and
   * its status (not asked of a service that refused the application: it would refuse that too).
   */
  private def beat(c: ShuffleServiceClient, s: NodeServiceAddress): Unit = {
    val holdsApplication = c.alive(s.host, s.port) match {
      case Some(timeoutMs) => heard(timeoutMs); true
      case None => registerAgain(c, s)
    }
    if (holdsApplication) takeStatus(c, s)
  }

  /** A service lets the application stay silent `timeoutMs`: from now on, heartbeats come often enough for it. */
  private def heard(timeoutMs: Long): Unit = {
    val interval = ShuffleServiceClient.aliveIntervalMs(timeoutMs)
    // Compared again under the lock: two services' answers on two lanes must not raise it back.
    if (interval < intervalMs) synchronized {
      if (interval < intervalMs) {
        intervalMs = interval
        val next = nextHeartbeat
        if (next != null && next.getDelay(TimeUnit.MILLISECONDS) > interval && next.cancel(false)) scheduleHeartbeat()
      }
    }
  }

  /**
   * `s` does not know the application (it restarted without spark.sluice.service.recoveryDir, or
   * removed it): registers again the dirs of every executor that announced `s`, gone or not (its
   * files are still there), as those executors registered them (their lane). A failure repeated at
   * the next heartbeat is logged at debug level. Whether the service took the application.
   */
  private def registerAgain(c: ShuffleServiceClient, s: NodeServiceAddress): Boolean = {
    val executors = Option(registered.get(s)).fold(Seq.empty[(String, Seq[String])])(_.asScala.toSeq.sortBy(_._1))
    // The application once, then every executor's dirs (on one connection without spark.authenticate).
    val (taken, failed) =
      try (true, c.registerExecutors(s.host, s.port, executors)._2.map { case (id, e) => s"$id (${e.getMessage})" })
      catch { case NonFatal(e) => (false, executors.map { case (id, _) => s"$id (${e.getMessage})" }) }
    val message = s"The Sluice shuffle service at ${s.host}:${s.port} did not know this application (it restarted " +
      s"without ${io.sluice.config.ServiceOptions.ServiceRecoveryDir.key}, or removed the application): registered " +
      s"again the dirs of ${executors.size - failed.size} of its ${executors.size} executors there" +
      (if (failed.isEmpty) "" else s"; not those of executors ${failed.mkString(", ")}, whose map outputs it cannot serve")
    if (failed.isEmpty) { registerAgainFailed.remove(s); logWarning(message) }
    else if (registerAgainFailed.put(s, message) == message) logDebug(s"$message (as at the heartbeat before)")
    else logWarning(message)
    taken
  }

  private def tell(service: NodeServiceAddress)(what: ShuffleServiceClient => Unit): Unit =
    try what(client())
    catch {
      case _: InterruptedException => Thread.currentThread().interrupt()
      case NonFatal(e) => logWarning(s"The Sluice shuffle service at ${service.host}:${service.port}: ${e.getMessage}")
    }
}

private[sluice] object NodeServices {

  val EndpointName = "SluiceNodeServices"

  /** A service's `Status` answer (JSON) and when it came (ms since the epoch). */
  final case class LastStatus(json: String, atMs: Long)

  /** How long the application's end waits for the services' answers (they answer in milliseconds when up). */
  val StopWaitMs = 30000L

  private val threadIds = new java.util.concurrent.atomic.AtomicInteger()

  /**
   * One service's messages, run one after another in the order offered, on a thread of `pool` while
   * any is queued (Spark's `SerialExecutor` idea, bounded by nothing but the caller). Thread-safe.
   */
  private[rpc] final class Lane(pool: java.util.concurrent.ExecutorService) {
    private val queue = new java.util.ArrayDeque[Runnable]()
    private var draining = false

    /**
     * Queues `message`; a `skippable` one only when nothing is queued or under way. False when it
     * was skipped, or the pool is shut down.
     */
    def offer(message: Runnable, skippable: Boolean): Boolean = {
      val start = synchronized {
        if (skippable && (draining || !queue.isEmpty)) return false
        queue.add(message)
        val idle = !draining
        draining = true
        idle
      }
      if (start) {
        try pool.execute(() => drain())
        catch {
          case _: java.util.concurrent.RejectedExecutionException =>
            synchronized { queue.clear(); draining = false }
            return false
        }
      }
      true
    }

    private def drain(): Unit = {
      var next = poll()
      while (next != null) {
        try next.run()
        catch { case _: InterruptedException => Thread.currentThread().interrupt() } // stopping
        next = poll()
      }
    }

    private def poll(): Runnable = synchronized {
      if (pool.isShutdown) queue.clear() // stopped: what is left goes unsaid
      val r = queue.poll()
      if (r == null) draining = false
      r
    }
  }

  /** How often the driver tries to tell a service the application ended, and the wait after the first failure. */
  val RemoveAttempts = 3
  val RemoveRetryWaitMs = 500L

  /** The shortest time between two status requests the Sluice tab starts. */
  val MinRefreshIntervalMs = 1000L

  /** An executor's announcement: it registered `dirs` with this service. */
  final case class Registered(host: String, port: Int, executorId: String, dirs: Seq[String])

  private val driverEndpoint = new LazyDriverEndpoint(EndpointName)

  /** Sets up the driver's endpoint, which hands announcements to `services`. */
  def ensureDriverEndpoint(services: NodeServices): Unit = driverEndpoint.ensure(new SparkInternals.DriverEndpoint {
    override def receive(message: Array[Byte]): Unit = RpcPayload.decode(message) match {
      case Registered(host, port, executorId, dirs) => services.announced(NodeServiceAddress(host, port), executorId, dirs)
      case other => log.warn(s"Unexpected message $other")
    }
    override def receiveAndReply(message: Array[Byte], reply: SparkInternals.RpcReply): Unit =
      reply.fail(new IllegalArgumentException(s"Unexpected message ${RpcPayload.decode(message)}"))
  })

  /** Tells the driver (from executor `executorId`) that `service` serves the map outputs it writes into `dirs`. */
  def announce(service: NodeServiceAddress, executorId: String, dirs: Seq[String]): Unit =
    driverEndpoint.ref.send(RpcPayload.encode(Registered(service.host, service.port, executorId, dirs)))

  def reset(): Unit = driverEndpoint.reset()

  private val log = org.slf4j.LoggerFactory.getLogger(classOf[NodeServices])
}
