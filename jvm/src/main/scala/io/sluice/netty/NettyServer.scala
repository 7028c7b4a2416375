package io.sluice.netty

import java.util.concurrent.ConcurrentHashMap

import scala.jdk.CollectionConverters._

import io.netty.channel.{Channel, ChannelFuture, ChannelFutureListener}
import io.netty.util.AttributeKey
import io.sluice.config.{SluiceConf, SluiceOptions}
import io.sluice.metrics.ServerReadSnapshot
import io.sluice.partition.PartitionReadScheduler
import org.apache.spark.network.TransportContext
import org.apache.spark.network.crypto.AuthServerBootstrap
import org.apache.spark.network.sasl.SecretKeyHolder
import org.apache.spark.network.server.{TransportServer, TransportServerBootstrap}
import org.apache.spark.network.util.TransportConf

/**
 * A Sluice server (Flink's NettyServer): binds one port, serves result partitions to remote
 * consumers (an executor's own, or, in a node shuffle service, those of every executor registered
 * with it: [[ServedApplications]], each connection reading one application's), and closes its
 * connections and port on [[shutdown]]. It is a
 * Spark TransportServer, so Spark's authentication and TLS guard each connection before the
 * upgrade to the Sluice protocol installs the server pipeline ([[NettyProtocol.installServer]]);
 * one remote host may hold at most spark.sluice.network.maxConnectionsPerPeer connections and
 * maxReadersPerPeer readers ([[PeerLimits]]).
 *
 * Remote readers' partition files are opened and read on the server's [[PartitionReadScheduler]]
 * (spark.sluice.network.readThreads), into its share of the network memory
 * (spark.sluice.network.readMemory), never on an event loop. Thread-safe: [[start]] and
 * [[shutdown]] are synchronized; the connection callbacks run on the connections' event loops.
 *
 * @param transportConf Spark's settings for module "sluice", Sluice's thread counts laid over
 *                      (laid over by the Spark boundary)
 * @param served        the applications whose partitions the server serves, and how
 * @param keys          Spark's secret lookup when spark.authenticate is on
 * @param bindHost      the address the server binds (and that producers' locations advertise)
 * @param sparkPipeline the names of the handlers Spark installs, which the upgrade replaces
 * @param portMaxRetries spark.port.maxRetries: how many ports above spark.sluice.network.port
 *                       [[start]] tries ([[PortRange]])
 */
final class NettyServer(
    conf: SluiceConf,
    transportConf: TransportConf,
    served: ServedApplications,
    keys: Option[SecretKeyHolder],
    bindHost: String,
    sparkPipeline: SparkPipelineNames,
    counters: TransportCounters,
    portMaxRetries: Int = PortRange.DefaultMaxRetries) {

  private val maxFrameLength = conf.get(SluiceOptions.MaxFrameLength).toInt
  private val segmentSize = conf.get(SluiceOptions.SegmentSize).toInt
  private val requestTimeoutMs = conf.get(SluiceOptions.RequestTimeout)
  private val peerLimits =
    new PeerLimits(conf.get(SluiceOptions.MaxConnectionsPerPeer), conf.get(SluiceOptions.MaxReadersPerPeer))

  private val acceptedChannels = ConcurrentHashMap.newKeySet[Channel]()
  private val upgradedChannels = ConcurrentHashMap.newKeySet[Channel]()

  @volatile private var context: TransportContext = _
  @volatile private var server: TransportServer = _
  @volatile private var scheduler: PartitionReadScheduler = _
  @volatile private var shutDown = false

  /**
   * Binds the server to the first free port of spark.sluice.network.port's [[PortRange]] (0 picks
   * a free port) and returns it.
   */
  def start(): Int = synchronized {
    if (server != null) throw new IllegalStateException("The Sluice server is already started")
    if (shutDown) throw new IllegalStateException("The Sluice server is shut down")
    context = new TransportContext(transportConf,
      new UpgradeRpcHandler(served, registerChannel, upgradeChannel, trackAccepted), true)
    val beforeAuthentication = new BeforeAuthenticationBootstrap(served)
    val bootstraps: java.util.List[TransportServerBootstrap] = keys match {
      case Some(k) => java.util.List.of(new AuthServerBootstrap(transportConf, k), beforeAuthentication)
      case None => java.util.List.of(beforeAuthentication)
    }
    server = PortRange(conf.get(SluiceOptions.Port), portMaxRetries).bind(bindHost) { port =>
      context.createServer(bindHost, port, bootstraps)
    }
    scheduler = new PartitionReadScheduler(PartitionReadScheduler.threads(conf.get(SluiceOptions.ReadThreads)),
      server.getPort.toString, conf.numberOfReadSegments, segmentSize)
    server.getPort
  }

  /** Its read threads' figures now, with `fileDescriptors` kept open; none before [[start]] (metrics read early). */
  def readSnapshot(fileDescriptors: Int): ServerReadSnapshot = {
    val s = scheduler
    if (s == null) ServerReadSnapshot.none else s.snapshot(fileDescriptors)
  }

  /** The threads reading partition files for this server's remote readers (after [[start]]). */
  def readScheduler: PartitionReadScheduler = {
    val s = scheduler
    if (s == null) throw new IllegalStateException("The Sluice server is not started")
    s
  }

  /** The server's port (after [[start]]). */
  def port: Int = {
    val s = server
    if (s == null) throw new IllegalStateException("The Sluice server is not started")
    s.getPort
  }

  def host: String = bindHost

  /**
   * A TCP connection was accepted (before any authentication or TLS handshake): it counts against
   * its peer's connections, or is closed at once when the peer holds its maximum (event loop).
   */
  private def trackAccepted(ch: Channel): Unit = {
    val peer = peerLimits.tryConnect(ch.remoteAddress())
    if (peer == null) {
      counters.connectionsRefused.increment()
      ch.close()
    } else {
      ch.attr(NettyServer.PeerAttribute).set(peer)
      counters.connectionsAccepted.increment()
      acceptedChannels.add(ch)
      ch.closeFuture().addListener(onClose {
        acceptedChannels.remove(ch)
        peerLimits.disconnect(peer)
      })
    }
  }

  /**
   * The client asked for the Sluice protocol (after authentication): the connection counts as a
   * Sluice connection from now on, before the client can read the reply (event loop).
   */
  private def registerChannel(ch: Channel): Unit = {
    upgradedChannels.add(ch)
    counters.activeServerConnections.incrementAndGet()
    ch.closeFuture().addListener(onClose {
      upgradedChannels.remove(ch)
      counters.activeServerConnections.decrementAndGet()
    })
  }

  /** The reply went out: install Sluice's protocol on the connection, reading `source` (event loop). */
  private def upgradeChannel(ch: Channel, source: PartitionSource): Unit = {
    val peer = Option(ch.attr(NettyServer.PeerAttribute).get).getOrElse(PeerLimits.Unlimited)
    val queue = new PartitionRequestQueue(source.partitions, counters, peer)
    val handler = new PartitionRequestServerHandler(source, queue, requestTimeoutMs, counters, segmentSize,
      maxFrameLength, readScheduler)
    NettyProtocol.installServer(ch, queue, handler, maxFrameLength, counters, sparkPipeline)
  }

  /** TCP connections the server holds now (upgraded or not). */
  def numAcceptedConnections: Int = acceptedChannels.size

  /** Connections the server serves Sluice on now. */
  def numConnections: Int = upgradedChannels.size

  /** The connections the server serves Sluice on now (tests: their pipelines, TLS sessions). */
  def channels: Seq[Channel] = upgradedChannels.asScala.toSeq

  /** What one remote host holds on the server now: (connections, readers). */
  def peerUsage(address: java.net.InetAddress): (Int, Int) = (peerLimits.connectionsOf(address), peerLimits.readersOf(address))

  /** Closes every connection the server serves (tests: a connection lost under running reads). */
  def closeConnections(): Unit = upgradedChannels.asScala.toList.foreach(_.close().syncUninterruptibly())

  /** Closes the served connections, the port and Spark's server context. Idempotent. */
  def shutdown(): Unit = synchronized {
    if (shutDown) return
    shutDown = true
    upgradedChannels.asScala.toList.foreach(_.close())
    if (server != null) server.close()
    if (context != null) context.close()
    if (scheduler != null && !scheduler.shutdown(NettyServer.ReadShutdownTimeoutMs)) {
      NettyServer.log.warn(s"Sluice's partition read threads did not end within ${NettyServer.ReadShutdownTimeoutMs}ms")
    }
  }

  private def onClose(action: => Unit): ChannelFutureListener = new ChannelFutureListener {
    override def operationComplete(f: ChannelFuture): Unit = action
  }

  override def toString: String = s"NettyServer($bindHost:${Option(server).map(_.getPort).getOrElse("-")})"
}

object NettyServer {
  private val log = org.slf4j.LoggerFactory.getLogger(classOf[NettyServer])

  /** How long shutting down waits for the reads in flight (they end with their connections). */
  val ReadShutdownTimeoutMs = 10000L

  /** The [[PeerLimits.Peer]] an accepted connection counts against. */
  private val PeerAttribute: AttributeKey[PeerLimits.Peer] = AttributeKey.valueOf("sluice.peer")
}
