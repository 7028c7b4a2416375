package io.sluice.service

import java.net.BindException
import java.util.concurrent.{Executors, ScheduledExecutorService, TimeUnit}

import io.sluice.config.{ServiceOptions, SluiceConf, SluiceOptions}
import io.sluice.netty.{NettyServer, PortRange, SparkPipelineNames, TransportCounters}
import io.sluice.partition.{PartitionedFileIndexCache, PartitionedFileReaderCache, ResultPartitionManager}
import org.apache.spark.network.util.TransportConf

/**
 * A node's Sluice shuffle service: one [[NettyServer]] on spark.sluice.service.port serving the
 * finished map outputs of every executor on the node that registered with it, for as long as their
 * application lives, whether the executors do or not (Spark's external shuffle service, whose
 * `ExternalBlockHandler` YARN's `YarnShuffleService` and the standalone Worker host, plays the same
 * part for the sort shuffle). It is the executor's own server, read threads, partition-file
 * readers and index cache over an [[ApplicationRegistry]] instead of one executor's partitions;
 * the platform adapters (a daemon, YARN's NodeManager) only start it, stop it and tell it when an
 * application ends. Pipelined (Real-Time Mode) partitions stay on their executors.
 *
 * Threads: the server's event loops and read threads, and one housekeeping thread (registrations'
 * disk work, removals, expiry of silent applications, closing the partition files no reader came
 * for in a second, as an executor's server does, so a node service between stages holds no
 * descriptor for the outputs it serves). Thread-safe.
 *
 * @param conf          Sluice's settings for the service's own transport (spark.sluice.network.*)
 * @param transportConf Spark's settings for module "sluice": I/O mode, TLS, crypto
 * @param admit         see [[ApplicationRegistry]]
 */
final class ShuffleService(
    conf: SluiceConf,
    transportConf: TransportConf,
    val settings: ServiceSettings,
    bindHost: String,
    sparkPipeline: SparkPipelineNames,
    admit: String => Option[String] = _ => None) {

  val counters = new TransportCounters
  private val housekeeping: ScheduledExecutorService = Executors.newSingleThreadScheduledExecutor { r =>
    val t = new Thread(r, "sluice-service-housekeeping")
    t.setDaemon(true)
    t
  }
  private val caches = ResultPartitionManager.Caches(
    new PartitionedFileReaderCache(PartitionedFileReaderCache.effectiveCapacity(settings.maxOpenFiles)),
    new PartitionedFileIndexCache(settings.indexCacheBytes))
  val registry = new ApplicationRegistry(settings, caches, housekeeping, settings.recoveryDir.map(new RegistrationLog(_)),
    () => totals, admit)
  private val requestedPort = conf.get(ServiceOptions.ServicePort)
  private val server = new NettyServer(conf.withSettings(SluiceOptions.Port.key -> requestedPort.toString), transportConf,
    registry, if (settings.authenticate) Some(registry) else None, bindHost, sparkPipeline, counters, portMaxRetries = 0)
  @volatile private var stopped = false

  /**
   * Recovers the registrations kept before a restart (see [[RegistrationLog]]), binds the service's
   * port and starts closing idle partition files and expiring silent applications; returns the port.
   */
  def start(): Int = {
    registry.recover()
    val port =
      try server.start()
      catch {
        case e: Throwable if PortRange.inUse(e) =>
          housekeeping.shutdownNow()
          val b = new BindException(s"The Sluice shuffle service could not bind $bindHost:$requestedPort " +
            s"(${ServiceOptions.ServicePort.key}): the port is in use (is another service running on this node?)")
          b.initCause(e)
          throw b
      }
    val sweep = PartitionedFileReaderCache.IdleMs / 2
    housekeeping.scheduleWithFixedDelay(() => caches.fileReaders.closeIdle(), sweep, sweep, TimeUnit.MILLISECONDS)
    val timeout = settings.applicationTimeoutMs
    if (timeout > 0) {
      val every = math.max(1000L, math.min(30000L, timeout / 4))
      housekeeping.scheduleWithFixedDelay(() => registry.expireSilent(System.nanoTime()), every, every, TimeUnit.MILLISECONDS)
    }
    port
  }

  def port: Int = server.port

  def host: String = bindHost

  /** What the transport did and holds now. */
  def totals: ServiceTotals = ServiceTotals(server.numConnections, counters.activeReaders.get, counters.bytesSent.sum,
    server.readSnapshot(caches.fileReaders.numDescriptors))

  /** The service's figures now, for its metrics systems (walks its applications' dirs; see [[ServiceMetrics]]). */
  def figures: ServiceFigures = ServiceStatus.figures(registry, totals)

  /** The service's metrics as JSON (see [[ServiceStatus]]); `appId`'s entry too when given. */
  def status(appId: Option[String] = None): String = ServiceStatus.json(registry, totals, appId)

  /** The platform says application `appId` ended: its files go now. */
  def applicationEnded(appId: String): Unit =
    housekeeping.execute(() => registry.removeApplication(appId, "its application ended"))

  /**
   * Stops serving: closes the port and every connection, ends the threads. With `deleteFiles`,
   * every registered application's files go too (a daemon stopping for good); without, they stay
   * for the platform (YARN deletes an application's dirs when it ends). Idempotent.
   */
  def stop(deleteFiles: Boolean): Unit = synchronized {
    if (!stopped) {
      stopped = true
      try server.shutdown()
      finally {
        housekeeping.shutdownNow()
        housekeeping.awaitTermination(10, TimeUnit.SECONDS)
        registry.clear(deleteFiles)
        caches.fileReaders.clear()
        caches.indexCache.clear()
      }
    }
  }

  override def toString: String = s"ShuffleService($bindHost:${if (stopped) "-" else requestedPort})"
}
