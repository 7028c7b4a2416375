package io.sluice.netty

import io.netty.channel.Channel
import io.sluice.config.SluiceConf
import io.sluice.partition.ResultPartitionManager
import org.apache.spark.network.sasl.SecretKeyHolder
import org.apache.spark.network.util.TransportConf

/**
 * One executor's network stack (Flink's NettyConnectionManager): it wires a [[NettyServer]], which
 * serves this executor's result partitions on one port, and a [[PartitionRequestClientFactory]],
 * which keeps exactly one connection per remote server for every input channel of every gate, over
 * the same settings, credentials and [[TransportCounters]], and starts and shuts both down together.
 *
 * Both sides are Spark TransportContexts, so Spark's authentication and encryption settings apply
 * (see [[NettyProtocol]]): with `auth` (Spark's SecretKeyHolder and the application id) every
 * connection authenticates with the shared secret before it carries any Sluice message, and with
 * spark.ssl.rpc.enabled in the TransportConf every connection is TLS from its first byte.
 *
 * Thread-safe.
 *
 * @param transportConf Spark's settings for module "sluice", finished by the Spark boundary (which
 *                      lays spark.sluice.network.serverThreads / clientThreads / connectTimeout over
 *                      its spark.sluice.io.* keys and checks TLS keys); used as given.
 * @param bindHost      the address the server binds (and that producers' locations advertise)
 * @param sparkPipeline the names of the handlers Spark's TransportContext installs, which the
 *                      upgrade to the Sluice protocol replaces (given by the Spark boundary)
 * @param portMaxRetries spark.port.maxRetries, for the server's [[PortRange]]
 * @param appId         the application this executor belongs to (default: the one `auth` names): its
 *                      server serves no other application's reader, and its readers name it to every server
 */
final class NettyConnectionManager(
    conf: SluiceConf,
    transportConf: TransportConf,
    partitionManager: ResultPartitionManager,
    auth: Option[(SecretKeyHolder, String)],
    bindHost: String,
    sparkPipeline: SparkPipelineNames,
    portMaxRetries: Int = PortRange.DefaultMaxRetries,
    appId: Option[String] = None) {

  /** The application: `appId`, else the one `auth` authenticates for, else the engine's own. */
  val applicationId: String = appId.orElse(auth.map(_._2)).getOrElse(NettyConnectionManager.DefaultAppId)
  auth.foreach { case (_, a) => require(a == applicationId, s"authenticated as application $a, serving $applicationId") }

  /** What crosses this executor's connections; tests check the flow-control invariants here. */
  val counters = new TransportCounters

  val server = new NettyServer(conf, transportConf, ServedApplications.only(applicationId, partitionManager),
    auth.map(_._1), bindHost, sparkPipeline, counters, portMaxRetries)
  val clientFactory =
    new PartitionRequestClientFactory(conf, transportConf, auth, bindHost, sparkPipeline, counters, applicationId)

  @volatile private var started = false
  @volatile private var shutDown = false

  /** Binds the server (the first free port of spark.sluice.network.port's [[PortRange]]) and returns its port. */
  def start(): Int = synchronized {
    if (started) throw new IllegalStateException("The Sluice connection manager is already started")
    if (shutDown) throw new IllegalStateException("The Sluice connection manager is shut down")
    val port = server.start()
    clientFactory.start()
    started = true
    port
  }

  /** The server's port (after [[start]]). */
  def port: Int = server.port

  def host: String = bindHost

  /**
   * The connection to the Sluice server at (host, port), see [[PartitionRequestClientFactory]];
   * `node`: a node shuffle service's (authenticated with the application's node-service key).
   */
  def createPartitionRequestClient(host: String, port: Int, node: Boolean = false): PartitionRequestClient =
    clientFactory.createPartitionRequestClient(host, port, node)

  /**
   * Starts opening the connection to the Sluice server at (host, port) without waiting (not to this
   * manager's own server), see [[PartitionRequestClientFactory.prepareConnection]]; `node`: a node
   * shuffle service's.
   */
  def prepareConnection(host: String, port: Int, node: Boolean = false): Boolean =
    !isOwnServer(host, port) && clientFactory.prepareConnection(host, port, node)

  /**
   * Starts opening the connection to the Sluice server at (host, port) for a reader that will need
   * it, see [[PartitionRequestClientFactory.connectAhead]].
   */
  def connectAhead(host: String, port: Int, node: Boolean = false): Boolean =
    !isOwnServer(host, port) && clientFactory.connectAhead(host, port, node)

  private def isOwnServer(host: String, port: Int): Boolean = host == bindHost && started && port == server.port

  /** Connections the server serves Sluice on now. */
  def numServerConnections: Int = server.numConnections

  /** Connections this executor's client holds now (one per remote server). */
  def numClientConnections: Int = clientFactory.numConnections

  /** The connections the server serves Sluice on now (tests: their pipelines, TLS sessions). */
  def serverChannels: Seq[Channel] = server.channels

  /** Closes every connection the server serves (tests: a connection lost under running reads). */
  def closeServerConnections(): Unit = server.closeConnections()

  /** Whether the connections of this manager are TLS (spark.ssl.rpc.enabled). */
  def isTls: Boolean = transportConf.sslRpcEnabled()

  /** Closes every client connection, the client threads, then the server. Idempotent. */
  def shutdown(): Unit = synchronized {
    if (shutDown) return
    shutDown = true
    clientFactory.shutdown()
    server.shutdown()
  }

  def isShutdown: Boolean = shutDown

  override def toString: String = s"NettyConnectionManager($bindHost:${if (started) server.port else "-"}, $counters)"
}

object NettyConnectionManager {

  /** The application of engine tests and benchmarks that run no Spark application. */
  val DefaultAppId = "sluice-engine"
}
