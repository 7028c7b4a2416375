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

import io.netty.channel.{ChannelFuture, ChannelFutureListener}
import io.sluice.config.{SluiceConf, SluiceOptions}
import org.apache.spark.network.TransportContext
import org.apache.spark.network.client.{RpcResponseCallback, TransportClientBootstrap, TransportClientFactory}
import org.apache.spark.network.crypto.AuthClientBootstrap
import org.apache.spark.network.sasl.SecretKeyHolder
import org.apache.spark.network.server.NoOpRpcHandler
import org.apache.spark.network.util.TransportConf

/**
 * The client side of the executor's network stack (Flink's PartitionRequestClientFactory): it keeps
 * exactly one TCP connection per remote server (host, port), shared by every input channel of every
 * gate and reused across shuffles. Concurrent first requests for the same server share one
 * connection attempt; a connection that closes is forgotten, and the next request opens a new one.
 * A connection can also be prepared before any reader needs it ([[prepareConnection]]: the Spark
 * boundary does so for the servers the driver names: peers' or node shuffle services), so an
 * application's first reduce tasks do not wait for the connection and its upgrade.
 *
 * Connection attempts run on the factory's own connector threads, never on the task thread that
 * asked: Spark interrupts task threads (speculative losers, cancelled jobs), and an interrupt that
 * reached Spark's connect or authentication would end the attempt that other readers wait for too
 * (and may leave a half-open channel behind). An interrupted task only stops waiting; the attempt
 * goes on and its connection serves the next reader. Each connection is a Spark TransportClient
 * (authenticated with `auth`, TLS with spark.ssl.rpc.enabled) upgraded to the Sluice protocol
 * ([[NettyProtocol.installClient]]), with a [[ConnectionHeartbeat]] that fails it when its peer stays
 * silent past the heartbeat timeout.
 *
 * Thread-safe.
 *
 * @param transportConf Spark's settings for module "sluice", Sluice's thread counts and connect
 *                      timeout laid over (laid over by the Spark boundary)
 * @param auth          Spark's secret lookup and the application id when spark.authenticate is on;
 *                      a node shuffle service is authenticated with the key derived from the
 *                      secret ([[io.sluice.service.ApplicationKey]]), not the secret itself
 * @param threadPrefix  names the connector threads (the executor's bind address)
 * @param sparkPipeline the names of the handlers Spark installs, which the upgrade replaces
 * @param applicationId the application every connection's upgrade names (default: the one `auth` names)
 */
final class PartitionRequestClientFactory(
    conf: SluiceConf,
    transportConf: TransportConf,
    auth: Option[(SecretKeyHolder, String)],
    threadPrefix: String,
    sparkPipeline: SparkPipelineNames,
    counters: TransportCounters,
    applicationId: String = null) {

  /** The application every upgrade names: `applicationId`, else the one `auth` authenticates for. */
  private val appId: String =
    Option(applicationId).orElse(auth.map(_._2)).getOrElse(NettyConnectionManager.DefaultAppId)

  private val maxFrameLength = conf.get(SluiceOptions.MaxFrameLength).toInt
  private val connectTimeoutMs = PartitionRequestClientFactory.connectTimeoutMs(conf)
  private val heartbeatTimeoutMs = ConnectionHeartbeat.timeoutMs(conf)

  private val connections = new ConcurrentHashMap[(String, Int), CompletableFuture[PartitionRequestClient]]()

  @volatile private var context: TransportContext = _
  @volatile private var clientFactory: TransportClientFactory = _
  @volatile private var nodeClientFactory: TransportClientFactory = _
  @volatile private var shutDown = false

  private val connector = {
    val threadCount = new AtomicInteger
    val pool = new ThreadPoolExecutor(PartitionRequestClientFactory.ConnectThreads,
      PartitionRequestClientFactory.ConnectThreads, 60L, TimeUnit.SECONDS, new LinkedBlockingQueue[Runnable](),
      (r: Runnable) => {
        val t = new Thread(r, s"sluice-connect-$threadPrefix-${threadCount.incrementAndGet()}")
        t.setDaemon(true)
        t
      })
    pool.allowCoreThreadTimeOut(true) // no thread lives on while nobody connects
    pool
  }

  /** Creates Spark's client context and factory; connections open on demand afterwards. */
  def start(): Unit = synchronized {
    if (clientFactory != null) throw new IllegalStateException("The Sluice client factory is already started")
    if (shutDown) throw new IllegalStateException("The Sluice client factory is shut down")
    context = new TransportContext(transportConf, new NoOpRpcHandler, false, true)
    def bootstraps(node: Boolean): java.util.List[TransportClientBootstrap] = auth match {
      case Some((keys, app)) =>
        java.util.List.of(new AuthClientBootstrap(transportConf, app,
            if (node) io.sluice.service.ApplicationKey.holder(keys) else keys))
      case None => java.util.List.of()
    }
    clientFactory = context.createClientFactory(bootstraps(node = false))
    nodeClientFactory = context.createClientFactory(bootstraps(node = true))
  }

  /**
   * The connection to the Sluice server at (host, port): the existing one, or a new one opened
   * (and authenticated) now, waiting at most spark.sluice.network.connectTimeout. An interrupt ends
   * the wait (InterruptedIOException, the thread's interrupt status kept) but not the attempt.
   * `node`: the server is a node shuffle service (authenticated with the node-service key).
   */
  def createPartitionRequestClient(host: String, port: Int, node: Boolean = false): PartitionRequestClient = {
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
          startConnecting(key, fresh, node)
        }
      }
      val client = await(attempt, host, port, deadline)
      if (client.isActive) return client
      connections.remove(key, attempt)
    }
    throw new IllegalStateException("unreachable")
  }

  /**
   * Starts opening the connection to (host, port) on a connector thread and returns at once, so the
   * first reader of that server finds it open (or its attempt under way, which it then shares). Does
   * nothing when a connection to it is held or being opened, when
   * [[PartitionRequestClientFactory.MaxPreparedConnections]] are held, or when the factory is not
   * running. A failed attempt is forgotten: the next reader tries again. `node`: the server is a
   * node shuffle service. Returns whether an attempt was started.
   */
  def prepareConnection(host: String, port: Int, node: Boolean = false): Boolean =
    connections.size < PartitionRequestClientFactory.MaxPreparedConnections && connectAhead(host, port, node)

  /**
   * Starts opening the connection to (host, port) on a connector thread for a reader that will need
   * it (an input gate's producers, when the gate is created), so channels whose turn comes later
   * find it open; as [[prepareConnection]], without its bound (a reader connects to its producers
   * anyway). `node`: the server is a node shuffle service. Returns whether an attempt was started.
   */
  def connectAhead(host: String, port: Int, node: Boolean = false): Boolean = {
    val key = (host, port)
    if (shutDown || clientFactory == null || connections.containsKey(key)) return false
    val fresh = new CompletableFuture[PartitionRequestClient]()
    if (connections.putIfAbsent(key, fresh) != null) return false
    startConnecting(key, fresh, node)
    true
  }

  /** Opens the connection for `attempt` on a connector thread; a failed attempt is forgotten. */
  private def startConnecting(key: (String, Int), attempt: CompletableFuture[PartitionRequestClient],
      node: Boolean): Unit = {
    val (host, port) = key
    val task: Runnable = () => {
      try {
        val client = connect(host, port, node, System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(connectTimeoutMs))
        client.channel.closeFuture().addListener(new ChannelFutureListener {
          override def operationComplete(f: ChannelFuture): Unit = connections.remove(key, attempt)
        })
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
  private def connect(host: String, port: Int, node: Boolean, deadline: Long): PartitionRequestClient = {
    val transport =
      try (if (node) nodeClientFactory else clientFactory).createUnmanagedClient(host, port)
      catch {
        case e: IOException => throw new IOException(s"Could not connect to the Sluice server at $host:$port: ${e.getMessage}", e)
      }
    val ch = transport.getChannel
    val remote = new InetSocketAddress(host, port)
    val upgraded = new CompletableFuture[PartitionRequestClient]()
    try {
      transport.sendRpc(ByteBuffer.wrap(NettyProtocol.upgradeRequest(appId)),
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
            if (ch.isActive) new IOException(s"The Sluice server at $host:$port refused the connection of application " +
                s"$appId: ${RemoteErrors.message(e)}", e)
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

  /** Connections held now (one per remote server). */
  def numConnections: Int =
    connections.values().asScala.count(f => f.isDone && !f.isCompletedExceptionally && f.join().isActive)

  /** The connection to (host, port), if one is held. */
  def connection(host: String, port: Int): Option[PartitionRequestClient] =
    Option(connections.get((host, port))).filter(f => f.isDone && !f.isCompletedExceptionally).map(_.join())

  /** Whether any connection is stalled (credit-less mode, no buffer free). */
  def isAnyStalled: Boolean = connections.values().asScala.exists { f =>
    f.isDone && !f.isCompletedExceptionally && {
      val d = f.join().channel.pipeline().get(classOf[NettyMessageDecoder])
      d != null && d.isStalled
    }
  }

  /** Says goodbye on every connection and closes it, then the connector threads and Spark's factory. Idempotent. */
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
    if (clientFactory != null) clientFactory.close()
    if (nodeClientFactory != null) nodeClientFactory.close()
    if (context != null) context.close()
  }

  override def toString: String = s"PartitionRequestClientFactory(${connections.size} servers)"
}

object PartitionRequestClientFactory {

  /** Connections opened at once; further attempts queue (their waiters' connect timeout runs). */
  val ConnectThreads = 16

  /**
   * Connections [[PartitionRequestClientFactory.prepareConnection]] opens ahead of any reader: past
   * this many held, a server's first reader's gate opens it ([[PartitionRequestClientFactory.connectAhead]]),
   * so a large cluster does not connect every executor pair only because they exist. The driver
   * names each executor the peers after it in its list (see the Spark boundary's PeerServers), so
   * every executor gets about this many prepared connections from others.
   */
  val MaxPreparedConnections = 64

  /** spark.sluice.network.connectTimeout, with 0 (follow spark.network.timeout) as Spark's default. */
  def connectTimeoutMs(conf: SluiceConf): Long = {
    val t = conf.get(SluiceOptions.ConnectTimeout)
    if (t > 0) t else ConnectionHeartbeat.DefaultTimeoutMs
  }
}
