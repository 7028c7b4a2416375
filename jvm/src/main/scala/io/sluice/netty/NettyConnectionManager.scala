package io.sluice.netty

import java.io.{IOException, InterruptedIOException}
import java.net.InetSocketAddress
import java.nio.ByteBuffer
import java.util.concurrent.{
  CompletableFuture, ConcurrentHashMap, ExecutionException, LinkedBlockingQueue, RejectedExecutionException, ThreadPoolExecutor,
  TimeUnit, TimeoutException
}
import java.util.concurrent.atomic.AtomicInteger

import scala.jdk.CollectionConverters._

import io.netty.channel.{Channel, ChannelFuture, ChannelFutureListener}
import io.netty.util.AttributeKey
import io.sluice.config.{SluiceConf, SluiceOptions}
import io.sluice.partition.ResultPartitionManager
import org.apache.spark.network.TransportContext
import org.apache.spark.network.client.{RpcResponseCallback, TransportClientBootstrap, TransportClientFactory}
import org.apache.spark.network.crypto.{AuthClientBootstrap, AuthServerBootstrap}
import org.apache.spark.network.sasl.SecretKeyHolder
import org.apache.spark.network.server.{NoOpRpcHandler, TransportServer, TransportServerBootstrap}
import org.apache.spark.network.util.{ConfigProvider, TransportConf}

/**
 * One executor's network stack (Flink's NettyConnectionManager): a Sluice server on one port that
 * serves this executor's result partitions to remote consumers, and a client side that keeps
 * exactly one TCP connection per remote server (host, port), shared by every input channel of
 * every gate and reused across shuffles. Concurrent first requests for the same server share one
 * connection attempt; a connection that closes is forgotten, and the next request opens a new one.
 *
 * Connection attempts run on the manager's own connector threads, never on the task thread that
 * asked: Spark interrupts task threads (speculative losers, cancelled jobs), and an interrupt that
 * reached Spark's connect or authentication would end the attempt that other readers wait for too
 * (and may leave a half-open channel behind). An interrupted task only stops waiting; the attempt
 * goes on and its connection serves the next reader. Each client connection carries a
 * [[ConnectionHeartbeat]] that fails it when its peer stays silent past the heartbeat timeout.
 *
 * Both sides are Spark TransportContexts, so Spark's authentication and encryption settings apply
 * (see [[NettyProtocol]]): with `auth` (Spark's SecretKeyHolder and the application id) every
 * connection authenticates with the shared secret before it carries any Sluice message, and with
 * spark.ssl.rpc.enabled in the TransportConf every connection is TLS from its first byte. Whatever
 * the security settings, one remote host may hold at most spark.sluice.network.maxConnectionsPerPeer
 * connections and maxReadersPerPeer readers on the server ([[PeerLimits]]).
 *
 * Thread-safe.
 *
 * @param transportConf Spark's settings for module "sluice" (SparkTransportConf.fromSparkConf in
 *                      Spark; `new TransportConf("sluice", new MapConfigProvider(...))` in tests).
 *                      spark.sluice.network.serverThreads / clientThreads / connectTimeout are laid
 *                      over its spark.sluice.io.* keys.
 * @param bindHost      the address the server binds (and that producers' locations advertise)
 * @param sparkPipeline the names of the handlers Spark's TransportContext installs, which the
 *                      upgrade to the Sluice protocol replaces (given by the Spark boundary)
 */
final class NettyConnectionManager(
    conf: SluiceConf,
    transportConf: TransportConf,
    partitionManager: ResultPartitionManager,
    auth: Option[(SecretKeyHolder, String)],
    bindHost: String,
    sparkPipeline: SparkPipelineNames) {

  /** What crosses this executor's connections; tests check the flow-control invariants here. */
  val counters = new TransportCounters

  private val tconf = NettyConnectionManager.effectiveTransportConf(transportConf, conf)
  private val maxFrameLength = conf.get(SluiceOptions.MaxFrameLength).toInt
  private val segmentSize = conf.get(SluiceOptions.SegmentSize).toInt
  private val requestTimeoutMs = conf.get(SluiceOptions.RequestTimeout)
  private val connectTimeoutMs = NettyConnectionManager.connectTimeoutMs(conf)
  private val peerLimits =
    new PeerLimits(conf.get(SluiceOptions.MaxConnectionsPerPeer), conf.get(SluiceOptions.MaxReadersPerPeer))

  /** spark.sluice.network.heartbeatTimeout as resolved by the Spark layer (0: Spark's default 120s). */
  val heartbeatTimeoutMs: Long = NettyConnectionManager.heartbeatTimeoutMs(conf)

  private val connections = new ConcurrentHashMap[(String, Int), CompletableFuture[PartitionRequestClient]]()
  private val acceptedChannels = ConcurrentHashMap.newKeySet[Channel]()
  private val upgradedServerChannels = ConcurrentHashMap.newKeySet[Channel]()

  @volatile private var serverContext: TransportContext = _
  @volatile private var clientContext: TransportContext = _
  @volatile private var server: TransportServer = _
  @volatile private var clientFactory: TransportClientFactory = _
  @volatile private var shutDown = false

  private val connector = {
    val threadCount = new AtomicInteger
    val pool = new ThreadPoolExecutor(NettyConnectionManager.ConnectThreads, NettyConnectionManager.ConnectThreads,
      60L, TimeUnit.SECONDS, new LinkedBlockingQueue[Runnable](),
      (r: Runnable) => {
        val t = new Thread(r, s"sluice-connect-$bindHost-${threadCount.incrementAndGet()}")
        t.setDaemon(true)
        t
      })
    pool.allowCoreThreadTimeOut(true) // no thread lives on while nobody connects
    pool
  }

  /** Binds the server (spark.sluice.network.port; 0 picks a free port) and returns its port. */
  def start(): Int = synchronized {
    if (server != null) throw new IllegalStateException("The Sluice connection manager is already started")
    if (shutDown) throw new IllegalStateException("The Sluice connection manager is shut down")
    NettyConnectionManager.checkTls(tconf)
    serverContext =
      new TransportContext(tconf, new UpgradeRpcHandler(registerServerChannel, upgradeServerChannel, trackAccepted), true)
    val serverBootstraps: java.util.List[TransportServerBootstrap] = auth match {
      case Some((keys, _)) => java.util.List.of(new AuthServerBootstrap(tconf, keys))
      case None => java.util.List.of()
    }
    server = serverContext.createServer(bindHost, conf.get(SluiceOptions.Port), serverBootstraps)
    clientContext = new TransportContext(tconf, new NoOpRpcHandler, false, true)
    val clientBootstraps: java.util.List[TransportClientBootstrap] = auth match {
      case Some((keys, appId)) => java.util.List.of(new AuthClientBootstrap(tconf, appId, keys))
      case None => java.util.List.of()
    }
    clientFactory = clientContext.createClientFactory(clientBootstraps)
    server.getPort
  }

  /** The server's port (after [[start]]). */
  def port: Int = {
    val s = server
    if (s == null) throw new IllegalStateException("The Sluice connection manager is not started")
    s.getPort
  }

  def host: String = bindHost

  // ---- server side ---------------------------------------------------------------------------

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
      ch.attr(NettyConnectionManager.PeerAttribute).set(peer)
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
  private def registerServerChannel(ch: Channel): Unit = {
    upgradedServerChannels.add(ch)
    counters.activeServerConnections.incrementAndGet()
    ch.closeFuture().addListener(onClose {
      upgradedServerChannels.remove(ch)
      counters.activeServerConnections.decrementAndGet()
    })
  }

  /** The reply went out: install Sluice's protocol on the connection (event loop). */
  private def upgradeServerChannel(ch: Channel): Unit = {
    val peer = Option(ch.attr(NettyConnectionManager.PeerAttribute).get).getOrElse(PeerLimits.Unlimited)
    val queue = new PartitionRequestQueue(partitionManager, counters, peer)
    val handler = new PartitionRequestServerHandler(partitionManager, queue, requestTimeoutMs, counters, segmentSize)
    NettyProtocol.installServer(ch, queue, handler, maxFrameLength, counters, sparkPipeline)
  }

  /** TCP connections the server holds now (upgraded or not). */
  def numAcceptedConnections: Int = acceptedChannels.size

  /** Connections the server serves Sluice on now. */
  def numServerConnections: Int = upgradedServerChannels.size

  /** Remote addresses (host:port) of the clients connected to this server. */
  def serverConnectionPeers: Seq[String] = upgradedServerChannels.asScala.toSeq.map(c => String.valueOf(c.remoteAddress()))

  /** The connections the server serves Sluice on now (tests: their pipelines, TLS sessions). */
  def serverChannels: Seq[Channel] = upgradedServerChannels.asScala.toSeq

  /** What one remote host holds on the server now: (connections, readers). */
  def peerUsage(address: java.net.InetAddress): (Int, Int) = (peerLimits.connectionsOf(address), peerLimits.readersOf(address))

  /** Whether the connections of this manager are TLS (spark.ssl.rpc.enabled). */
  def isTls: Boolean = tconf.sslRpcEnabled()

  /** Closes every connection the server serves (tests: a connection lost under running reads). */
  def closeServerConnections(): Unit = upgradedServerChannels.asScala.toList.foreach(_.close().syncUninterruptibly())

  // ---- client side -----------------------------------------------------------------------------

  /**
   * The connection to the Sluice server at (host, port): the existing one, or a new one opened
   * (and authenticated) now, waiting at most spark.sluice.network.connectTimeout. An interrupt ends
   * the wait (InterruptedIOException, the thread's interrupt status kept) but not the attempt.
   */
  def createPartitionRequestClient(host: String, port: Int): PartitionRequestClient = {
    if (shutDown) throw new IllegalStateException("The Sluice connection manager is shut down")
    if (clientFactory == null) throw new IllegalStateException("The Sluice connection manager is not started")
    val key = (host, port)
    val deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(connectTimeoutMs)
    while (true) {
      var attempt = connections.get(key)
      if (attempt == null) {
        val fresh = new CompletableFuture[PartitionRequestClient]()
        attempt = connections.putIfAbsent(key, fresh)
        if (attempt == null) {
          attempt = fresh
          startConnecting(key, fresh)
        }
      }
      val client = await(attempt, host, port, deadline)
      if (client.isActive) return client
      connections.remove(key, attempt)
    }
    throw new IllegalStateException("unreachable")
  }

  /** Opens the connection for `attempt` on a connector thread; a failed attempt is forgotten. */
  private def startConnecting(key: (String, Int), attempt: CompletableFuture[PartitionRequestClient]): Unit = {
    val (host, port) = key
    val task: Runnable = () => {
      try {
        val client = connect(host, port, System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(connectTimeoutMs))
        client.channel.closeFuture().addListener(onClose(connections.remove(key, attempt)))
        attempt.complete(client)
        if (shutDown) client.close()
      } catch {
        case e: Throwable =>
          connections.remove(key, attempt)
          attempt.completeExceptionally(e)
      }
    }
    try connector.execute(task)
    catch {
      case e: RejectedExecutionException =>
        connections.remove(key, attempt)
        attempt.completeExceptionally(new IOException("The Sluice connection manager is shut down", e))
    }
  }

  private def await(
      f: CompletableFuture[PartitionRequestClient], host: String, port: Int, deadline: Long): PartitionRequestClient = {
    try f.get(math.max(0L, deadline - System.nanoTime()), TimeUnit.NANOSECONDS)
    catch {
      case _: TimeoutException =>
        throw new IOException(s"Timed out after ${connectTimeoutMs}ms waiting for the connection to the Sluice server " +
          s"at $host:$port (spark.sluice.network.connectTimeout)")
      case e: ExecutionException => throw e.getCause match {
          case io: IOException => new IOException(io.getMessage, io)
          case other => new IOException(s"Could not connect to the Sluice server at $host:$port: $other", other)
        }
      case _: InterruptedException =>
        Thread.currentThread().interrupt()
        throw new InterruptedIOException(s"Interrupted while waiting for the connection to the Sluice server at " +
          s"$host:$port (the connection attempt goes on for other readers)")
    }
  }

  /** Opens, authenticates and upgrades one connection (a connector thread, which waits). */
  private def connect(host: String, port: Int, deadline: Long): PartitionRequestClient = {
    val transport =
      try clientFactory.createUnmanagedClient(host, port)
      catch {
        case e: IOException => throw new IOException(s"Could not connect to the Sluice server at $host:$port: ${e.getMessage}", e)
      }
    val ch = transport.getChannel
    val remote = new InetSocketAddress(host, port)
    val upgraded = new CompletableFuture[PartitionRequestClient]()
    try {
      transport.sendRpc(ByteBuffer.wrap(NettyProtocol.UpgradeRequest),
        new RpcResponseCallback {
          override def onSuccess(response: ByteBuffer): Unit = {
            try {
              if (!NettyProtocol.isUpgradeReply(response)) {
                throw new IOException(s"$host:$port answered the Sluice upgrade with something else (not a Sluice server?)")
              }
              val handler = new CreditBasedPartitionRequestClientHandler(s"$host:$port", counters)
              NettyProtocol.installClient(ch, handler, maxFrameLength, heartbeatTimeoutMs, counters, sparkPipeline)
              upgraded.complete(new PartitionRequestClient(ch, handler, remote))
            } catch {
              case e: Throwable => upgraded.completeExceptionally(e)
            }
          }
          override def onFailure(e: Throwable): Unit = upgraded.completeExceptionally(
            if (ch.isActive) e
            else new IOException(
              s"The Sluice server at $host:$port closed the connection before it answered the " +
                s"upgrade to the Sluice protocol (${e.getMessage}). A server closes the connections of a host beyond " +
                s"${SluiceOptions.MaxConnectionsPerPeer.key}, and those of clients whose spark.authenticate or " +
                "spark.ssl.rpc.enabled differ from its own: its log says which", e))
        })
      val client = await(upgraded, host, port, deadline)
      counters.connectionsOpened.increment()
      client
    } catch {
      case e: Throwable =>
        ch.close()
        throw e
    }
  }

  /** Connections this executor's client holds now (one per remote server). */
  def numClientConnections: Int =
    connections.values().asScala.count(f => f.isDone && !f.isCompletedExceptionally && f.join().isActive)

  /** This executor's connection to (host, port), if it holds one. */
  def clientConnection(host: String, port: Int): Option[PartitionRequestClient] =
    Option(connections.get((host, port))).filter(f => f.isDone && !f.isCompletedExceptionally).map(_.join())

  /** Whether any connection of the client is stalled (credit-less mode, no buffer free). */
  def isAnyClientStalled: Boolean = connections.values().asScala.exists { f =>
    f.isDone && !f.isCompletedExceptionally && {
      val d = f.join().channel.pipeline().get(classOf[NettyMessageDecoder])
      d != null && d.isStalled
    }
  }

  // ---- shutdown ------------------------------------------------------------------------------------

  /** Closes every connection, the server and the client threads. Idempotent. */
  def shutdown(): Unit = synchronized {
    if (shutDown) return
    shutDown = true
    val closing = connections.values().asScala.toList.flatMap { f =>
      if (f.isDone && !f.isCompletedExceptionally) Some(f.join().close()) else None
    }
    connections.clear()
    connector.shutdownNow()
    closing.foreach(_.awaitUninterruptibly(1000))
    try connector.awaitTermination(1, TimeUnit.SECONDS)
    catch { case _: InterruptedException => Thread.currentThread().interrupt() }
    upgradedServerChannels.asScala.toList.foreach(_.close())
    if (clientFactory != null) clientFactory.close()
    if (server != null) server.close()
    if (clientContext != null) clientContext.close()
    if (serverContext != null) serverContext.close()
  }

  def isShutdown: Boolean = shutDown

  private def onClose(action: => Unit): ChannelFutureListener = new ChannelFutureListener {
    override def operationComplete(f: ChannelFuture): Unit = action
  }

  override def toString: String = s"NettyConnectionManager($bindHost:${Option(server).map(_.getPort).getOrElse("-")}, $counters)"
}

object NettyConnectionManager {

  /** The [[PeerLimits.Peer]] an accepted connection counts against. */
  private val PeerAttribute: AttributeKey[PeerLimits.Peer] = AttributeKey.valueOf("sluice.peer")

  /** Connections opened at once; further attempts queue (their waiters' connect timeout runs). */
  val ConnectThreads = 16

  /**
   * Refuses spark.ssl.rpc.enabled without the keys it needs, naming them (Spark's own check says
   * only that keys were not found).
   */
  def checkTls(tconf: TransportConf): Unit = if (tconf.sslRpcEnabled() && !tconf.sslRpcEnabledAndKeysAreValid()) {
    val missing =
      if (tconf.sslRpcOpenSslEnabled()) s"spark.ssl.rpc.privateKey (${tconf.sslRpcPrivateKey()}) and " +
      s"spark.ssl.rpc.certChain (${tconf.sslRpcCertChain()}) are not both existing files (with " +
      "spark.ssl.rpc.openSslEnabled=true they hold the keys)"
      else s"spark.ssl.rpc.keyStore (${tconf.sslRpcKeyStore()}) is not an existing file"
    throw new IllegalArgumentException(s"spark.ssl.rpc.enabled is true but $missing: Sluice's shuffle " +
      "connections cannot be TLS without keys")
  }

  /** spark.sluice.network.heartbeatTimeout, with 0 (follow spark.network.timeout) as Spark's default. */
  def heartbeatTimeoutMs(conf: SluiceConf): Long = {
    val t = conf.get(SluiceOptions.HeartbeatTimeout)
    if (t > 0) t else ConnectionHeartbeat.DefaultTimeoutMs
  }

  /** spark.sluice.network.connectTimeout, with 0 (follow spark.network.timeout) as Spark's default. */
  def connectTimeoutMs(conf: SluiceConf): Long = {
    val t = conf.get(SluiceOptions.ConnectTimeout)
    if (t > 0) t else ConnectionHeartbeat.DefaultTimeoutMs
  }

  /**
   * `base` with Sluice's thread counts and connect timeout laid over its `spark.<module>.io.*`
   * keys: a positive Sluice setting wins; 0 keeps the TransportConf's own value when it has one,
   * else min(cores, 8).
   */
  def effectiveTransportConf(base: TransportConf, conf: SluiceConf): TransportConf = {
    val module = base.getModuleName
    val cores = Runtime.getRuntime.availableProcessors()
    def threads(sluice: Int, existing: Int): Int =
      if (sluice > 0) sluice else if (existing > 0) existing else math.min(cores, 8)
    val connectSeconds = math.max(1L, (connectTimeoutMs(conf) + 999) / 1000)
    val overrides = Map(
      s"spark.$module.io.serverThreads" -> threads(conf.get(SluiceOptions.ServerThreads), base.serverThreads()).toString,
      s"spark.$module.io.clientThreads" -> threads(conf.get(SluiceOptions.ClientThreads), base.clientThreads()).toString,
      s"spark.$module.io.connectionCreationTimeout" -> s"${connectSeconds}s")
    new TransportConf(module, new OverlayConfigProvider(base, overrides))
  }

  /** A TransportConf's settings with some replaced. */
  private final class OverlayConfigProvider(base: TransportConf, overrides: Map[String, String]) extends ConfigProvider {
    override def get(name: String): String = overrides.get(name) match {
      case Some(v) => v
      case None =>
        val v = base.get(name, null)
        if (v == null) throw new java.util.NoSuchElementException(name)
        v
    }

    /** Only TransportConf.cryptoConf enumerates settings: rebuild its spark.network.crypto.config.* entries. */
    override def getAll: java.lang.Iterable[java.util.Map.Entry[String, String]] = {
      val crypto = base.cryptoConf().stringPropertyNames().asScala.toSeq.map { k =>
        "spark.network.crypto.config." + k.stripPrefix("commons.crypto.") -> base.cryptoConf().getProperty(k)
      }
      (crypto.toMap ++ overrides).asJava.entrySet()
    }
  }
}
