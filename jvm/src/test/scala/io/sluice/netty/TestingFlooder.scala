package io.sluice.netty

import java.net.{InetAddress, InetSocketAddress, Socket}
import java.nio.ByteBuffer
import java.util.concurrent.{ConcurrentLinkedQueue, TimeUnit}

import scala.jdk.CollectionConverters._

import io.netty.bootstrap.Bootstrap
import io.netty.channel.{Channel, ChannelHandlerContext, ChannelInboundHandlerAdapter, ChannelInitializer}
import io.netty.channel.socket.SocketChannel
import io.sluice.partition.ResultPartitionID
import org.apache.spark.network.TransportContext
import org.apache.spark.network.server.{NoOpRpcHandler, TransportChannelHandler}
import org.apache.spark.network.util.{IOMode, MapConfigProvider, NettyUtils, TransportConf}

/**
 * A hostile client on its own loopback address (127.0.0.2 by default: Linux routes all of
 * 127.0.0.0/8 to the loopback device, so the server sees a host of its own): it opens raw TCP
 * connections, and Sluice connections (Spark's pipeline, the real upgrade, Sluice's codec) on
 * which it asks for partitions by their guessable ids without ever announcing credit. It records
 * every ErrorResponse the server sends it.
 */
final class TestingFlooder(serverPort: Int, val address: String = "127.0.0.2") extends AutoCloseable {

  val inetAddress: InetAddress = InetAddress.getByName(address)
  private val tconf = new TransportConf("sluice", new MapConfigProvider(TestingExecutor.DefaultTransport.asJava))
  private val context = new TransportContext(tconf, new NoOpRpcHandler, false, true)
  private val group = NettyUtils.createEventLoop(IOMode.NIO, 1, "sluice-test-flooder")
  private val counters = new TransportCounters
  private val rawSockets = new ConcurrentLinkedQueue[Socket]()
  private val channels = new ConcurrentLinkedQueue[Channel]()

  /** Every ErrorResponse received on the flooder's Sluice connections. */
  val errors = new ConcurrentLinkedQueue[ErrorResponse]()

  /** `n` plain TCP connections to the server, from [[address]]. */
  def openRawConnections(n: Int): Seq[Socket] = (0 until n).map { _ =>
    val s = new Socket()
    s.bind(new InetSocketAddress(inetAddress, 0))
    s.connect(new InetSocketAddress(InetAddress.getLoopbackAddress, serverPort), 10000)
    rawSockets.add(s)
    s
  }

  /** Opens a connection from [[address]] and upgrades it to the Sluice protocol (fails if refused). */
  def openSluiceConnection(): Channel = {
    @volatile var sparkHandler: TransportChannelHandler = null
    val bootstrap = new Bootstrap().group(group).channel(NettyUtils.getClientChannelClass(IOMode.NIO))
      .localAddress(new InetSocketAddress(inetAddress, 0))
      .handler(new ChannelInitializer[SocketChannel] {
        override def initChannel(ch: SocketChannel): Unit = sparkHandler = context.initializePipeline(ch, true)
      })
    val ch = bootstrap.connect(new InetSocketAddress(InetAddress.getLoopbackAddress, serverPort)).syncUninterruptibly().channel()
    channels.add(ch)
    val reply = sparkHandler.getClient.sendRpcSync(
      ByteBuffer.wrap(NettyProtocol.upgradeRequest(NettyConnectionManager.DefaultAppId)), 30000)
    assert(NettyProtocol.isUpgradeReply(reply), "the server upgraded the flooder's connection")
    val capture = new ChannelInboundHandlerAdapter {
      override def channelRead(ctx: ChannelHandlerContext, msg: AnyRef): Unit = msg match {
        case e: ErrorResponse => errors.add(e)
        case other => ctx.fireChannelRead(other)
      }
    }
    ch.eventLoop().submit(() => {
      val handler = new CreditBasedPartitionRequestClientHandler(s"127.0.0.1:$serverPort", counters)
      NettyProtocol.installClient(ch, handler, 64 << 10, 120000L, counters,
        org.apache.spark.shuffle.sluice.internal.SparkInternals.TransportPipeline)
      ch.pipeline().addBefore("sluiceClientHandler", "floodCapture", capture)
    }).syncUninterruptibly()
    ch
  }

  /** Asks for subpartition 0 of `partition` on `ch` with no credit: a reader the server must keep. */
  def request(ch: Channel, partition: ResultPartitionID, waitForProducer: Boolean = false): Unit =
    ch.writeAndFlush(PartitionRequest(partition, 0, 1, InputChannelID.random(), 0, creditBased = true,
        waitForProducer = waitForProducer)).syncUninterruptibly()

  /** The raw connections the server closed (read returns the end within `timeoutMs` each). */
  def closedByServer(sockets: Seq[Socket], timeoutMs: Int): Seq[Socket] = sockets.filter { s =>
    s.setSoTimeout(timeoutMs)
    try s.getInputStream.read() < 0
    catch {
      case _: java.net.SocketTimeoutException => false
      case _: java.io.IOException => true // reset
    }
  }

  private var closed = false

  /** Closes every connection and the flooder's threads. Idempotent. */
  override def close(): Unit = if (!closed) {
    closed = true
    rawSockets.forEach(s =>
      try s.close()
      catch { case _: Throwable => () })
    channels.forEach(_.close().syncUninterruptibly())
    group.shutdownGracefully(0, 1, TimeUnit.SECONDS).syncUninterruptibly()
    context.close()
  }
}
