package org.apache.spark.shuffle.sluice

import java.util.{Collections, Map => JMap}

import scala.util.control.NonFatal

import io.sluice.config.{ServiceOptions, SluiceOptions}
import io.sluice.netty.PartitionRequestClientFactory
import io.sluice.service.ShuffleServiceClient
import org.apache.spark.SparkConf
import org.apache.spark.internal.Logging
import org.apache.spark.shuffle.api.{ShuffleDataIO, ShuffleDriverComponents, ShuffleExecutorComponents}
import org.apache.spark.shuffle.sluice.internal.{SparkFeatureCheck, SparkInternals, TransportConfOverlay}
import org.apache.spark.shuffle.sluice.rpc.{NodeServices, ShuffleMigration}
import org.apache.spark.shuffle.sort.io.LocalDiskShuffleDataIO

/**
 * Sluice's shuffle storage plugin for Spark's driver
 * (`spark.shuffle.sort.io.plugin.class=org.apache.spark.shuffle.sluice.SluiceShuffleDataIO`, which
 * `sluice.configure` and `sluice conf` set): its [[SluiceShuffleDriverComponents]] tell Spark
 * whether map outputs outlive their executor. The executor half is Spark's own local-disk one,
 * which Sluice's shuffle manager never uses (Spark's sort shuffle would).
 */
class SluiceShuffleDataIO(conf: SparkConf) extends ShuffleDataIO {
  override def driver(): ShuffleDriverComponents = new SluiceShuffleDriverComponents(conf)
  override def executor(): ShuffleExecutorComponents = new LocalDiskShuffleDataIO(conf).executor()
}

/**
 * The driver's side of Sluice's storage plugin (Spark's ShuffleDriverComponents). With
 * spark.sluice.service.enabled it reports reliable storage: node shuffle services keep every map
 * output while its node lives, so Spark's DAGScheduler keeps a lost executor's outputs registered
 * (only a lost node, seen as a FetchFailed, unregisters them) and dynamic allocation releases idle
 * executors without shuffle tracking. It keeps the list of services that hold the application's
 * outputs ([[NodeServices]]) and tells them when Spark drops a shuffle and when the application
 * ends. Without the service it reports no reliable storage. Whichever, a dropped shuffle is
 * passed on to the executors' BlockManagers, as Spark's own local-disk components do. Called by
 * Spark on the driver (SparkContext's start and stop, the ContextCleaner's thread); thread-safe.
 */
class SluiceShuffleDriverComponents(conf: SparkConf) extends ShuffleDriverComponents with Logging {

  private val serviceEnabled =
    try SluiceEnvironment.sluiceConf(conf).get(ServiceOptions.ServiceEnabled)
    catch { case NonFatal(_) => false } // the shuffle manager refuses a bad setting, naming it

  @volatile private var services: Option[NodeServices] = None

  /** Where decommissioned executors' map outputs may have gone (Spark's fallback storage), when configured. */
  @volatile private var fallback: Option[SluiceFallbackStorage] = None

  override def initializeApplication(): JMap[String, String] = {
    SparkFeatureCheck.warnings(conf).foreach(w => logWarning(s"Sluice: $w"))
    if (serviceEnabled) {
      val s = new NodeServices(() => client)
      NodeServices.ensureDriverEndpoint(s)
      services = Some(s)
    }
    fallback = SluiceFallbackStorage(conf)
    SluiceShuffleDriverComponents.current = Some(this)
    Collections.emptyMap()
  }

  private lazy val client: ShuffleServiceClient = {
    val c = SparkInternals.conf
    // Messages to services are small: a dead service's node must not hold a message (nor, on its
    // lane, the next ones) for spark.network.timeout, neither connecting nor waiting for the answer.
    val waitMs = math.min(SluiceEnvironment.networkTimeoutMs(c), SluiceShuffleDriverComponents.MaxMessageWaitMs)
    val engine = SluiceEnvironment.engineConf(c)
    val sluice = engine.withSettings(SluiceOptions.ConnectTimeout.key ->
      math.min(PartitionRequestClientFactory.connectTimeoutMs(engine), waitMs).toString)
    val transportConf = TransportConfOverlay(SparkInternals.transportConf(c, 1), sluice)
    val secret = if (SparkInternals.isAuthenticationEnabled) Some(SparkInternals.secretKeyHolder) else None
    new ShuffleServiceClient(transportConf, c.getAppId, secret, waitMs)
  }

  override def supportsReliableStorage(): Boolean = serviceEnabled

  /**
   * Spark dropped shuffle `shuffleId` (the ContextCleaner): every executor's BlockManager is told,
   * as Spark's own local-disk components do (its RemoveShuffle is what releases an executor's
   * partitions and files through Sluice's shuffle manager), then every node service, and the
   * copies in Spark's fallback storage of its map outputs, if any went there (on this thread,
   * whatever spark.storage.decommission.fallbackStorage.cleanUp says: only this application reads them).
   */
  override def removeShuffle(shuffleId: Int, blocking: Boolean): Unit = {
    SparkInternals.removeShuffleFromExecutors(shuffleId, blocking)
    services.foreach(_.removeShuffle(shuffleId, blocking))
    fallback.foreach(f => if (ShuffleMigration.takeFallbackShuffle(shuffleId)) f.deleteShuffle(shuffleId))
  }

  /** The node services holding the application's outputs (for the Sluice tab). */
  private[sluice] def nodeServices: Option[NodeServices] = services

  /**
   * The application ends: the node services forget it, and everything Sluice put in Spark's
   * fallback storage for it is deleted (whatever spark.storage.decommission.fallbackStorage.cleanUp says).
   */
  override def cleanupApplication(): Unit = {
    SluiceShuffleDriverComponents.current = None
    services.foreach(_.stop())
    services = None
    NodeServices.reset()
    fallback.foreach(_.deleteApplication())
    fallback = None
  }
}

private[sluice] object SluiceShuffleDriverComponents {

  /** The longest the driver waits for one node service's answer (a removal, a heartbeat). */
  val MaxMessageWaitMs = 10000L

  /** The driver's components of the running application, for the Sluice tab (None without the service). */
  @volatile private[sluice] var current: Option[SluiceShuffleDriverComponents] = None
}
