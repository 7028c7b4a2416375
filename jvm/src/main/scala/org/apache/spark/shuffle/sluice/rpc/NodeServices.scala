package org.apache.spark.shuffle.sluice.rpc

import java.util.concurrent.{ConcurrentHashMap, Executors, ScheduledExecutorService, TimeUnit}

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.sluice.NodeServiceAddress
import io.sluice.service.ShuffleServiceClient
import org.apache.spark.internal.Logging
import org.apache.spark.shuffle.sluice.internal.SparkInternals

/**
 * The driver's list of the node shuffle services that hold the application's map outputs, as its
 * executors announce them when they register, and what the driver tells them: that the
 * application is alive (every 30 s, or a third of the service's timeout), which shuffle Spark
 * dropped, and that the application ended (the role Spark's BlockManagerMaster plays towards its
 * external shuffle services). It also keeps each service's last status for the Sluice tab, asked
 * with every heartbeat and when the tab is shown.
 * Messages from executors travel as [[RpcPayload]] bytes to one driver endpoint. One instance per
 * application, owned by [[org.apache.spark.shuffle.sluice.SluiceShuffleDriverComponents]];
 * thread-safe (Spark's RPC threads, the ContextCleaner's, its own daemon thread).
 */
private[sluice] final class NodeServices(client: () => ShuffleServiceClient) extends Logging {

  private val services = ConcurrentHashMap.newKeySet[NodeServiceAddress]()
  private val statuses = new ConcurrentHashMap[NodeServiceAddress, NodeServices.LastStatus]()
  @volatile private var lastRefreshMs = 0L
  @volatile private var intervalMs = ShuffleServiceClient.aliveIntervalMs(0L)
  @volatile private var stopped = false
  private val timer: ScheduledExecutorService = Executors.newSingleThreadScheduledExecutor { r =>
    val t = new Thread(r, "sluice-node-services")
    t.setDaemon(true)
    t
  }
  timer.schedule((() => heartbeat()): Runnable, intervalMs, TimeUnit.MILLISECONDS)

  /** An executor registered with `service` (Spark's RPC thread). */
  def announced(service: NodeServiceAddress): Unit =
    if (services.add(service)) {
      logInfo(s"The Sluice shuffle service at ${service.host}:${service.port} serves map outputs of this application")
      timer.execute(() => tell(service)(c => takeStatus(c, service)))
    }

  /** The services known now. */
  def known: Set[NodeServiceAddress] = services.asScala.toSet

  /** Each service's last status (JSON, see the service's `Status`) and when it came. */
  def lastStatuses: Map[NodeServiceAddress, NodeServices.LastStatus] = statuses.asScala.toMap

  /**
   * Asks every service for its status now, on the timer's thread (the Sluice tab does when shown,
   * so its next view is fresh): at most once a second, never waiting here.
   */
  def refreshStatuses(): Unit = {
    val now = System.currentTimeMillis()
    if (!stopped && now - lastRefreshMs >= NodeServices.MinRefreshIntervalMs) {
      lastRefreshMs = now
      try timer.execute(() => known.foreach(s => tell(s)(takeStatus(_, s))))
      catch { case NonFatal(_) => () } // stopping
    }
  }

  private def takeStatus(c: ShuffleServiceClient, s: NodeServiceAddress): Unit =
    statuses.put(s, NodeServices.LastStatus(c.status(s.host, s.port), System.currentTimeMillis()))

  /** Spark dropped shuffle `shuffleId`: every service deletes its files (waiting for them when `blocking`). */
  def removeShuffle(shuffleId: Int, blocking: Boolean): Unit = {
    val work: Runnable = () => known.foreach(s => tell(s)(_.removeShuffle(s.host, s.port, shuffleId)))
    if (blocking) work.run() else if (!stopped) timer.execute(work)
  }

  /** The application ends: every service deletes what it holds of it; then the timer and client stop. */
  def stop(): Unit = if (!stopped) {
    stopped = true
    timer.shutdownNow()
    known.foreach(removeApplication)
    try client().close()
    catch { case NonFatal(e) => logDebug("Closing the node service client", e) }
  }

  /**
   * Tells `s` the application ended, again after a failure (a service whose link just came back
   * may break the first request), at most [[NodeServices.RemoveAttempts]] times; after that its files
   * stay until the service's spark.sluice.service.applicationTimeout.
   */
  private def removeApplication(s: NodeServiceAddress): Unit = {
    var attempt = 1
    while (attempt > 0) {
      try {
        client().removeApplication(s.host, s.port)
        attempt = 0
      } catch {
        case NonFatal(e) if attempt < NodeServices.RemoveAttempts =>
          logInfo(s"Telling the Sluice shuffle service at ${s.host}:${s.port} that the application ended " +
            s"(attempt $attempt of ${NodeServices.RemoveAttempts}): ${e.getMessage}; trying again")
          Thread.sleep(NodeServices.RemoveRetryWaitMs * attempt)
          attempt += 1
        case NonFatal(e) =>
          logWarning(s"The Sluice shuffle service at ${s.host}:${s.port} was not told that the application ended " +
            s"(${NodeServices.RemoveAttempts} attempts): ${e.getMessage}; its files there go after the service's " +
            s"${io.sluice.config.ServiceOptions.ServiceApplicationTimeout.key}")
          attempt = 0
      }
    }
  }

  private def heartbeat(): Unit = if (!stopped) {
    try known.foreach { s =>
        tell(s) { c =>
          val timeout = c.alive(s.host, s.port)
          intervalMs = math.min(intervalMs, ShuffleServiceClient.aliveIntervalMs(timeout))
          takeStatus(c, s)
        }
      }
    finally if (!stopped) {
        try timer.schedule((() => heartbeat()): Runnable, intervalMs, TimeUnit.MILLISECONDS)
        catch { case NonFatal(_) => () } // stopping
      }
  }

  private def tell(service: NodeServiceAddress)(what: ShuffleServiceClient => Unit): Unit =
    try what(client())
    catch {
      case NonFatal(e) => logWarning(s"The Sluice shuffle service at ${service.host}:${service.port}: ${e.getMessage}")
    }
}

private[sluice] object NodeServices {

  val EndpointName = "SluiceNodeServices"

  /** A service's `Status` answer (JSON) and when it came (ms since the epoch). */
  final case class LastStatus(json: String, atMs: Long)

  /** How often the driver tries to tell a service the application ended, and the wait after the first failure. */
  val RemoveAttempts = 3
  val RemoveRetryWaitMs = 500L

  /** The shortest time between two status requests the Sluice tab starts. */
  val MinRefreshIntervalMs = 1000L

  /** An executor's announcement: it registered with this service. */
  final case class Registered(host: String, port: Int)

  private val driverEndpoint = new LazyDriverEndpoint(EndpointName)

  /** Sets up the driver's endpoint, which hands announcements to `services`. */
  def ensureDriverEndpoint(services: NodeServices): Unit = driverEndpoint.ensure(new SparkInternals.DriverEndpoint {
    override def receive(message: Array[Byte]): Unit = RpcPayload.decode(message) match {
      case Registered(host, port) => services.announced(NodeServiceAddress(host, port))
      case other => log.warn(s"Unexpected message $other")
    }
    override def receiveAndReply(message: Array[Byte], reply: SparkInternals.RpcReply): Unit =
      reply.fail(new IllegalArgumentException(s"Unexpected message ${RpcPayload.decode(message)}"))
  })

  /** Tells the driver (from an executor) that this executor's map outputs are served by `service`. */
  def announce(service: NodeServiceAddress): Unit =
    driverEndpoint.ref.send(RpcPayload.encode(Registered(service.host, service.port)))

  def reset(): Unit = driverEndpoint.reset()

  private val log = org.slf4j.LoggerFactory.getLogger(classOf[NodeServices])
}
