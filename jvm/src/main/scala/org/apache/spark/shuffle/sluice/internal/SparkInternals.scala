package org.apache.spark.shuffle.sluice.internal

import java.io.File

import scala.concurrent.Future
import scala.concurrent.duration._
import scala.jdk.CollectionConverters._
import scala.xml.Node

import com.codahale.metrics.MetricRegistry
import io.sluice.netty.SparkPipelineNames
import io.sluice.partition.consumer.ProducerLocation
import jakarta.servlet.http.HttpServletRequest
import org.apache.spark.{
  Aggregator, MapOutputTracker, MapOutputTrackerMaster, SecurityManager, SparkConf, SparkContext, SparkEnv, TaskContext
}
import org.apache.spark.metrics.{MetricsSystem, MetricsSystemInstances}
import org.apache.spark.metrics.source.Source
import org.apache.spark.deploy.SparkHadoopUtil
import org.apache.spark.network.netty.SparkTransportConf
import org.apache.spark.network.util.{MapConfigProvider, TransportConf}
import org.apache.spark.rpc.{RpcCallContext, RpcEndpointRef, RpcEnv, RpcTimeout, ThreadSafeRpcEndpoint}
import org.apache.spark.scheduler.{MapStatus, SparkListenerEvent}
import org.apache.spark.serializer.Serializer
import org.apache.spark.shuffle.FetchFailedException
import org.apache.spark.status.ElementTrackingStore
import org.apache.spark.storage.{BlockId, BlockManagerId, FallbackStorage}
import org.apache.spark.ui.{SparkUI, SparkUITab, UIUtils, WebUIPage}
import org.apache.spark.util.{AccumulatorV2, RpcUtils, Utils}
import org.apache.spark.util.collection.ExternalSorter
import org.apache.spark.util.kvstore.KVStore
import org.json4s.JValue

/**
 * The adapter between Sluice and Spark's private (`private[spark]`) APIs: SparkEnv and what hangs
 * off it, map statuses and FetchFailedException, ExternalSorter, the RPC environment, the metrics
 * system, the web UI and the History Server's status store, the TransportConfs built from Spark's
 * settings, and the names of the handlers in the Netty pipelines Spark's TransportContext builds.
 *
 * Not every internal can be reached through it: the shuffle SPI is itself `private[spark]`, and
 * the managers, handle, writer, reader and block resolver implement it by extending Spark's types;
 * the record serializers handle SQL's UnsafeRow; the engine (`io.sluice`) builds its transport on
 * Spark's network library and copies memory with `Platform`. Each such use outside this package
 * is listed, with its reason, in the allowlist SparkInternalsCheckSuite enforces (a new one fails
 * that test, naming the class, member and user).
 *
 * Spark may change any of these in any release, and the JVM links them lazily, so a change would
 * otherwise surface as a NoSuchMethodError inside some task. [[SparkInternalsCheck]] links every
 * reference the boundary's classes (this adapter and the rest of `org.apache.spark.shuffle.sluice`)
 * make against the running Spark once at start-up (from both shuffle managers, on the driver and
 * on every executor) and fails naming the Spark version when one is gone. Everything here is
 * thread-safe.
 */
object SparkInternals {

  /**
   * The handler names TransportContext.initializePipeline gives (Spark 4.3): `encoder`,
   * `frameDecoder`, `decoder`, `idleStateHandler`, `handler`, and `chunkFetchHandler` on servers
   * with a separate chunk-fetch pool. Public for Sluice's tools and tests that run the engine
   * without a Spark application.
   */
  val TransportPipeline: SparkPipelineNames = SparkPipelineNames(
    encoder = "encoder",
    frameDecoder = "frameDecoder",
    removed = Seq("decoder", "idleStateHandler"),
    optional = Seq("chunkFetchHandler"),
    handler = "handler",
    source = s"Spark ${org.apache.spark.SPARK_VERSION}")

  /** A class of Spark's network-common jar: where a node service's class preloader finds its transport's classes. */
  def networkCommonClass: Class[_] = classOf[org.apache.spark.network.TransportContext]

  /**
   * Checks, once per JVM, that everything this adapter uses exists in the running Spark: the
   * driver always, an executor unless it runs the builds the driver checked ([[CheckedBuild]]).
   */
  private[sluice] def verify(conf: SparkConf, isDriver: Boolean): Unit =
    if (isDriver) SparkInternalsCheck.verifyOnDriver(conf) else SparkInternalsCheck.verifyOnExecutor(conf)

  // ---- SparkEnv ---------------------------------------------------------------------------

  private[sluice] def env: SparkEnv = {
    val e = SparkEnv.get
    if (e == null) throw new IllegalStateException("Sluice needs a running SparkEnv (no SparkContext or executor here)")
    e
  }

  private[sluice] def conf: SparkConf = env.conf

  private[sluice] def executorId: String = env.executorId

  /** This executor's BlockManagerId: its real executor id and host, as Spark's recovery expects. */
  private[sluice] def blockManagerId: BlockManagerId = env.blockManager.blockManagerId

  /** Whether this JVM's BlockManager has its id (local mode's executor starts before it does). */
  private[sluice] def isBlockManagerInitialized: Boolean = {
    val e = SparkEnv.get
    e != null && e.blockManager != null && e.blockManager.blockManagerId != null
  }

  private[sluice] def localDirs: Seq[File] = env.blockManager.diskBlockManager.localDirs.toSeq

  /**
   * The local dirs Spark was configured with (spark.local.dir, or what YARN, the standalone Worker
   * or Kubernetes set): the parents of the BlockManager's dirs, which Spark deletes when the
   * executor stops, whereas these live as long as the application (YARN's and the Worker's
   * application dirs).
   */
  private[sluice] def localRootDirs: Seq[File] = localDirs.map(_.getAbsoluteFile.getParentFile).distinct

  /**
   * The TransportConf for Sluice's server and clients, with Spark's RPC SSL options
   * (spark.ssl.rpc.*, falling back to spark.ssl.*) as the SecurityManager resolved them.
   */
  private[sluice] def transportConf(conf: SparkConf, numCores: Int): TransportConf =
    transportConf(conf, numCores, env.securityManager)

  /** [[transportConf]] with the SSL options `security` resolved (tests, without a SparkEnv). */
  private[sluice] def transportConf(conf: SparkConf, numCores: Int, security: SecurityManager): TransportConf =
    SparkTransportConf.fromSparkConf(conf, "sluice", numCores, None, Some(security.getRpcSSLOptions()))

  /**
   * The TransportConf of module "shuffle" that serves blocks of files (FileSegmentManagedBuffer's
   * memory-mapping threshold and lazy file descriptors), from the application's settings.
   */
  private[sluice] def shuffleTransportConf(conf: SparkConf): TransportConf =
    new TransportConf("shuffle", new MapConfigProvider(conf.getAll.toMap.asJava))

  private[sluice] def isAuthenticationEnabled: Boolean = env.securityManager.isAuthenticationEnabled()

  private[sluice] def secretKeyHolder: org.apache.spark.network.sasl.SecretKeyHolder = env.securityManager

  // ---- Map outputs and fetch failures -----------------------------------------------------

  /**
   * The location Sluice reports in MapStatus: this executor's real BlockManagerId with the Sluice
   * server's port in its topology info (`sluice:<port>`), the way spark-rapids advertises its
   * transport, so readers find the server while executor-loss handling still keys on the real
   * executor id and host.
   */
  private[sluice] def mapOutputLocation(sluicePort: Int): BlockManagerId = {
    val bm = blockManagerId
    BlockManagerId(bm.executorId, bm.host, bm.port, Some(SluiceLocation.encode(sluicePort, bm.topologyInfo)))
  }

  /**
   * The location of a map output a node shuffle service at (host, port) serves: this executor's
   * real BlockManagerId (Spark's executor- and host-loss handling keys on it) with the service in
   * its topology info (`sluice-node:<port>@<host>`).
   */
  private[sluice] def nodeServedLocation(serviceHost: String, servicePort: Int): BlockManagerId = {
    val bm = blockManagerId
    BlockManagerId(bm.executorId, bm.host, bm.port,
      Some(SluiceLocation.encodeNode(serviceHost, servicePort, bm.topologyInfo)))
  }

  /**
   * The location of a map output Sluice copied to Spark's decommissioning fallback storage: Spark's
   * own placeholder for that storage (FallbackStorage.FALLBACK_BLOCK_MANAGER_ID, which Spark
   * registers with the BlockManagerMaster and never loses with an executor) with Sluice's marker
   * in its topology info, so Sluice's readers read the copy ([[SluiceLocation.FallbackMarker]]).
   */
  private[sluice] def fallbackStorageLocation: BlockManagerId = {
    val f = FallbackStorage.FALLBACK_BLOCK_MANAGER_ID
    BlockManagerId(f.executorId, f.host, f.port, Some(SluiceLocation.FallbackMarker))
  }

  /** The Hadoop configuration Spark gives its own file system clients (spark.hadoop.*, the cluster's files). */
  private[sluice] def hadoopConfiguration(conf: SparkConf): org.apache.hadoop.conf.Configuration =
    SparkHadoopUtil.get.newConfiguration(conf)

  private[sluice] def mapStatus(location: BlockManagerId, sizes: Array[Long], mapId: Long, checksum: Long): MapStatus =
    MapStatus(location, sizes, mapId, checksum)

  private def mapOutputTracker: MapOutputTracker = env.mapOutputTracker

  /**
   * Points the MapStatus of map output `mapId` of `shuffleId` at `location` (the driver, after an
   * executor received the output from a decommissioning one); false when the shuffle is unknown.
   */
  def updateMapOutput(shuffleId: Int, mapId: Long, location: BlockManagerId): Boolean = mapOutputTracker match {
    case master: MapOutputTrackerMaster =>
      val known = master.containsShuffle(shuffleId)
      if (known) master.updateMapOutput(shuffleId, mapId, location)
      known
    case other => throw new IllegalStateException(s"Map outputs are moved on the driver, not with ${other.getClass.getName}")
  }

  /**
   * The map outputs node shuffle services serve, as the driver's MapOutputTracker has them: (service
   * host, port) -> shuffle id -> how many of that shuffle's map outputs it serves. The driver only;
   * walks every registered map output (the Sluice tab, when shown).
   */
  private[sluice] def nodeServedMapOutputs: Map[(String, Int), Map[Int, Int]] = mapOutputTracker match {
    case master: MapOutputTrackerMaster =>
      val counts = scala.collection.mutable.Map.empty[((String, Int), Int), Int]
      master.shuffleStatuses.foreach { case (shuffleId, status) =>
        status.withMapStatuses(_.foreach { s =>
          if (s != null && SluiceLocation.isNodeServed(s.location)) {
            val p = SluiceLocation.producer(s.location)
            val key = ((p.host, p.port), shuffleId)
            counts(key) = counts.getOrElse(key, 0) + 1
          }
        })
      }
      counts.toSeq.groupBy(_._1._1).map { case (service, c) => service -> c.map { case ((_, id), n) => id -> n }.toMap }
    case _ => Map.empty
  }

  /**
   * Has every BlockManager drop shuffle `shuffleId` (the driver, when Spark's ContextCleaner drops
   * it): each executor's shuffle manager unregisters it. Waits for them when `blocking`.
   */
  private[sluice] def removeShuffleFromExecutors(shuffleId: Int, blocking: Boolean): Unit =
    env.blockManager.master.removeShuffle(shuffleId, blocking)

  /** (location, [(block, size, mapIndex)]) of the map outputs a reader needs. */
  private[sluice] def mapSizesByExecutorId(shuffleId: Int, startMapIndex: Int, endMapIndex: Int, startPartition: Int,
      endPartition: Int): Iterator[(BlockManagerId, collection.Seq[(BlockId, Long, Int)])] =
    mapOutputTracker.getMapSizesByExecutorId(shuffleId, startMapIndex, endMapIndex, startPartition, endPartition)

  /**
   * A FetchFailedException for one map output. Must be called on the task thread: its constructor
   * marks the TaskContext as fetch-failed, which makes Spark recompute the map output.
   */
  private[sluice] def fetchFailed(location: BlockManagerId, shuffleId: Int, mapId: Long, mapIndex: Int, reduceId: Int,
      message: String, cause: Throwable): Exception =
    new FetchFailedException(location, shuffleId, mapId, mapIndex, reduceId, message, cause)

  /** Folds the read metrics of a finished read into the task's (Stages tab, SQL tab, REST). */
  private[sluice] def mergeShuffleReadMetrics(context: TaskContext): Unit = context.taskMetrics().mergeShuffleReadMetrics()

  // ---- Records ------------------------------------------------------------------------------

  /** The application's I/O encryption key (spark.io.encryption.enabled), which every executor of it shares. */
  def ioEncryptionKey: Option[Array[Byte]] = env.securityManager.getIOEncryptionKey()

  /**
   * Whether `serializer`'s output can be cut between records and its pieces concatenated in
   * another order (Spark's private Serializer.supportsRelocationOfSerializedObjects): then one
   * stream serves every subpartition.
   */
  private[sluice] def supportsRelocation(serializer: Serializer): Boolean = serializer.supportsRelocationOfSerializedObjects

  /** The column count of SQL's UnsafeRowSerializer (a private field), for reading rows back. */
  private[sluice] def unsafeRowFieldCount(serializer: Serializer): Option[Int] =
    if (serializer.getClass.getName != UnsafeRowSerializerClass) None
    else {
      val f = serializer.getClass.getDeclaredField(UnsafeRowSerializerFields)
      f.setAccessible(true)
      Some(f.getInt(serializer))
    }

  private[sluice] val UnsafeRowSerializerClass = "org.apache.spark.sql.execution.UnsafeRowSerializer"
  private[sluice] val UnsafeRowSerializerFields = "numFields"
  private[sluice] val UnsafeRowSerializerDataSize = "dataSize"

  /**
   * The exchange's `dataSize` metric that SQL's UnsafeRowSerializer adds every written row's size
   * to (a private field; None when the serializer has none). It is the size AQE plans with: an
   * exchange's runtime statistics are this metric and its record count, so a shuffle that leaves
   * it at 0 looks empty to AQE's join selection, which then broadcasts it whatever its size.
   */
  private[sluice] def unsafeRowDataSize(serializer: Serializer): Option[AccumulatorV2[Long, Long]] =
    if (serializer.getClass.getName != UnsafeRowSerializerClass) None
    else {
      val f = serializer.getClass.getDeclaredField(UnsafeRowSerializerDataSize)
      f.setAccessible(true)
      Option(f.get(serializer)).map(_.asInstanceOf[AccumulatorV2[Long, Long]])
    }

  /**
   * Sorts `records` by `ordering` (aggregating them with `aggregator` inside the sorter) in Spark's
   * ExternalSorter, which spills through the task's memory manager and stops at task completion.
   */
  private[sluice] def sortAndCombine(context: TaskContext, aggregator: Option[Aggregator[Any, Any, Any]],
      ordering: Ordering[Any], serializer: Serializer, records: Iterator[Product2[Any, Any]]): Iterator[Product2[Any, Any]] = {
    val sorter = new ExternalSorter[Any, Any, Any](context, aggregator = aggregator, partitioner = None,
      ordering = Some(ordering), serializer = serializer)
    sorter.insertAllAndUpdateMetrics(records)
  }

  // ---- RPC to the driver ------------------------------------------------------------------

  /** An endpoint of Sluice's on the driver; messages are [[RpcPayload]] bytes, one at a time. */
  private[sluice] trait DriverEndpoint {
    def receive(message: Array[Byte]): Unit
    def receiveAndReply(message: Array[Byte], reply: RpcReply): Unit
  }

  /** How a [[DriverEndpoint]] answers one request, now or later (at most once). */
  private[sluice] trait RpcReply {
    def reply(message: Array[Byte]): Unit
    def fail(e: Throwable): Unit
  }

  /** A handle on a driver endpoint, from any JVM of the application. */
  private[sluice] final class DriverEndpointRef private[SparkInternals] (ref: RpcEndpointRef) {
    def send(message: Array[Byte]): Unit = ref.send(message)

    /** Asks; the future fails after `timeoutMs`, naming `timeoutKey` (the setting to raise). */
    def ask(message: Array[Byte], timeoutMs: Long, timeoutKey: String): Future[Array[Byte]] =
      ref.ask[Array[Byte]](message, new RpcTimeout(timeoutMs.millis, timeoutKey))
  }

  /** Sets up `endpoint` under `name` in this JVM's RpcEnv (the driver's). */
  private[sluice] def setupDriverEndpoint(name: String, endpoint: DriverEndpoint): Unit = {
    val rpc = env.rpcEnv
    rpc.setupEndpoint(name,
      new ThreadSafeRpcEndpoint {
        override val rpcEnv: RpcEnv = rpc
        override def receive: PartialFunction[Any, Unit] = { case bytes: Array[Byte] => endpoint.receive(bytes) }
        override def receiveAndReply(context: RpcCallContext): PartialFunction[Any, Unit] = {
          case bytes: Array[Byte] => endpoint.receiveAndReply(bytes,
              new RpcReply {
                override def reply(message: Array[Byte]): Unit = context.reply(message)
                override def fail(e: Throwable): Unit = context.sendFailure(e)
              })
        }
      })
  }

  /** The driver's endpoint `name`, reached through this JVM's RpcEnv. */
  private[sluice] def driverEndpointRef(name: String): DriverEndpointRef =
    new DriverEndpointRef(RpcUtils.makeDriverRef(name, env.conf, env.rpcEnv))

  // ---- Metrics system -----------------------------------------------------------------------

  /** A source Sluice registered with Spark's metrics system. */
  private[sluice] final class RegisteredSource private[SparkInternals] (system: MetricsSystem, source: Source) {
    def remove(): Unit = system.removeSource(source)
  }

  /**
   * Whether Spark's metrics system can name a source now. It names one
   * `<spark.metrics.namespace, else spark.app.id>.<executor id>.<source name>`; a driver (and a
   * local-mode executor) knows its application id only once the task scheduler started, and
   * a source registered earlier would go by its bare source name.
   */
  private[sluice] def canNameMetricsSource(conf: SparkConf): Boolean =
    (conf.contains("spark.metrics.namespace") || conf.contains("spark.app.id")) && conf.contains("spark.executor.id")

  /**
   * Publishes `registry` in this JVM's metrics system as the source `sourceName`, so its metrics
   * are named `<namespace>.<executor id>.<sourceName>.<metric>` in every sink.
   */
  private[sluice] def registerMetricsSource(sourceName: String, registry: MetricRegistry): RegisteredSource =
    registerMetricsSource(env.metricsSystem, sourceName, registry)

  private[sluice] def registerMetricsSource(system: MetricsSystem, name: String, registry: MetricRegistry): RegisteredSource = {
    val source = new Source {
      override val sourceName: String = name
      override val metricRegistry: MetricRegistry = registry
    }
    system.registerSource(source)
    new RegisteredSource(system, source)
  }

  /** A metrics system of Sluice's own, in a JVM that runs no Spark application (the node shuffle service daemon). */
  private[sluice] final class OwnMetricsSystem private[SparkInternals] (system: MetricsSystem) {
    def stop(): Unit = system.stop()
  }

  /**
   * Starts a metrics system of the instance Spark's own shuffle service uses (`shuffleService`),
   * configured from `conf` as in any Spark process (spark.metrics.conf, spark.metrics.conf.*), with
   * `registry` as its one source `sourceName`: named `<sourceName>.<metric>` in every sink (only
   * the driver and executor instances have a namespace). Without the static sources (code
   * generation, Hive's catalog): the JVM runs no queries.
   */
  private[sluice] def startShuffleServiceMetricsSystem(conf: SparkConf, sourceName: String,
      registry: MetricRegistry): OwnMetricsSystem = {
    val system = MetricsSystem.createMetricsSystem(MetricsSystemInstances.SHUFFLE_SERVICE, conf)
    registerMetricsSource(system, sourceName, registry)
    system.start(registerStaticSources = false)
    new OwnMetricsSystem(system)
  }

  // ---- Web UI -------------------------------------------------------------------------------

  /** A page of a tab Sluice adds to Spark's UI; the adapter frames its body as Spark's pages. */
  private[sluice] trait UiPage {
    def title: String
    def render(request: HttpServletRequest): Seq[Node]
    def renderJson(request: HttpServletRequest): JValue
  }

  /**
   * Adds the tab `name` at `/<prefix>/` (the page) and `/<prefix>/json` to the application's UI;
   * false when the UI is off (spark.ui.enabled=false).
   */
  private[sluice] def attachUiTab(sc: SparkContext, name: String, prefix: String, page: UiPage): Boolean =
    sc.ui match {
      case Some(ui) => attachUiTab(ui, name, prefix, page); true
      case None => false
    }

  /** The same tab in a UI the History Server builds for a finished application. */
  private[sluice] def attachUiTab(ui: SparkUI, name: String, prefix: String, page: UiPage): Unit =
    ui.attachTab(new UiTab(ui, name, prefix, page))

  /** The status store behind a UI: live, or the History Server's replay of an event log. */
  private[sluice] def uiStore(ui: SparkUI): KVStore = ui.store.store

  /** Every entry of type `cls` in a status store, in the order of its natural index. */
  private[sluice] def storedEntries[T](store: KVStore, cls: Class[T]): Seq[T] = {
    val all = store.view(cls).closeableIterator()
    try all.asScala.toList
    finally all.close()
  }

  /** Writes `value` into the status store a History Server plugin's listeners fill. */
  private[sluice] def writeToStore(store: ElementTrackingStore, value: Any): Unit = store.write(value)

  // ---- Listener bus -------------------------------------------------------------------------

  /** Posts `event` on the driver's listener bus (and so into the event log, when it is on). */
  private[sluice] def postEvent(sc: SparkContext, event: SparkListenerEvent): Unit = sc.listenerBus.post(event)

  private final class UiTab(ui: SparkUI, override val name: String, prefix: String, page: UiPage)
    extends SparkUITab(ui, prefix) { self =>
    attachPage(new WebUIPage("") {
      override def render(request: HttpServletRequest): Seq[Node] =
        UIUtils.headerSparkPage(request, page.title, page.render(request), self)
      override def renderJson(request: HttpServletRequest): JValue = page.renderJson(request)
    })
  }

  /** `path` under the UI's base URI (behind a proxy, the proxy's). */
  private[sluice] def uiLink(request: HttpServletRequest, path: String): String = UIUtils.prependBaseUri(request, path)

  private[sluice] def formatDate(millis: Long): String = UIUtils.formatDate(millis)

  private[sluice] def bytesToString(bytes: Long): String = Utils.bytesToString(bytes)
}

/**
 * How the server to read a map output from travels in a BlockManagerId's topology info:
 * `sluice:<port>[;<original>]` for the executor's own server, `sluice-node:<port>@<host>[;<original>]`
 * for the node shuffle service it registered with, and `sluice-fallback` on Spark's fallback
 * storage placeholder for a map output in the fallback storage (no server: readers read the copy).
 */
private[sluice] object SluiceLocation {
  private val Prefix = "sluice:"
  private val NodePrefix = "sluice-node:"
  val FallbackMarker = "sluice-fallback"

  def encode(port: Int, original: Option[String]): String = Prefix + port + original.fold("")(";" + _)

  def encodeNode(host: String, port: Int, original: Option[String]): String =
    s"$NodePrefix$port@$host" + original.fold("")(";" + _)

  /** Where to read the map output at `location` from. */
  def producer(location: BlockManagerId): ProducerLocation = location.topologyInfo match {
    case Some(t) if t.startsWith(Prefix) =>
      ProducerLocation(location.executorId, location.host, t.drop(Prefix.length).takeWhile(_ != ';').toInt)
    case Some(t) if t.startsWith(NodePrefix) =>
      val server = t.drop(NodePrefix.length).takeWhile(_ != ';')
      val at = server.indexOf('@')
      ProducerLocation(location.executorId, server.substring(at + 1), server.substring(0, at).toInt, node = true)
    case Some(FallbackMarker) => ProducerLocation(location.executorId, location.host, location.port, fallback = true)
    case other => throw new IllegalStateException(s"Map output at $location carries no Sluice server " +
        s"(topology info $other): was it written by another shuffle manager?")
  }

  /** The port of the server at `location` (the executor's or its node service's). */
  def port(location: BlockManagerId): Int = producer(location).port

  /** Whether a node shuffle service serves the map output at `location`. */
  def isNodeServed(location: BlockManagerId): Boolean = location.topologyInfo.exists(_.startsWith(NodePrefix))
}
