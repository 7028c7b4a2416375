package io.sluice.netty

import java.nio.ByteBuffer
import java.nio.charset.StandardCharsets

import io.netty.channel.{Channel, ChannelHandler, ChannelPipeline}
import org.apache.spark.network.buffer.ManagedBuffer
import org.apache.spark.network.client.{RpcResponseCallback, TransportClient}
import org.apache.spark.network.server.{RpcHandler, StreamManager}

/**
 * Where Sluice's Netty pipeline is set up, in one place (Flink's NettyProtocol).
 *
 * Connections are opened by Spark's network-common (TransportContext), so that Spark's
 * authentication (AuthClientBootstrap/AuthServerBootstrap, which also install AES encryption with
 * spark.network.crypto.enabled) and TLS (spark.ssl.rpc.*) guard them exactly as they guard Spark's
 * own. Once a connection is up (and authenticated), the client sends one RPC, the upgrade request
 * naming its application (`sluice/2 <application id>`); the server's RpcHandler, which Spark's
 * AuthRpcHandler only lets through after authentication, checks that it serves that application
 * ([[ServedApplications]]: a server refuses another application's reader, authenticated or not),
 * answers [[UpgradeReply]] and swaps Spark's codec and handlers for Sluice's, and so does the
 * client on the answer, before it sends any Sluice frame. Neither side sends anything between
 * the request and its answer, so no bytes are left in Spark's frame decoder when it goes. What
 * Spark put in front of its codec (TLS, cipher, logging handlers) stays where it is:
 * {{{
 *   [TLS | cipher | logging]  sluiceEncoder                   sluiceDecoder  sluiceServerHandler  sluiceQueue  (server)
 *   [TLS | cipher | logging]  sluiceEncoder  sluiceHeartbeat  sluiceDecoder  sluiceClientHandler               (client)
 * }}}
 * Spark's idleStateHandler goes with its codec: a connection reading shuffle data may rightly carry
 * nothing for long (no credit, an idle pipelined partition), so the client's [[ConnectionHeartbeat]]
 * asks the server instead. The installs run on the connection's event loop.
 */
private[netty] object NettyProtocol {

  /** The protocol's name and version in the upgrade; a server refuses any other. */
  val Version = "sluice/2"
  val UpgradeReply: Array[Byte] = s"$Version ok".getBytes(StandardCharsets.US_ASCII)

  /** The upgrade request of a reader of application `appId`. */
  def upgradeRequest(appId: String): Array[Byte] = s"$Version $appId".getBytes(StandardCharsets.UTF_8)

  private val encoder = new NettyMessageEncoder

  def installServer(
      ch: Channel,
      queue: PartitionRequestQueue,
      handler: PartitionRequestServerHandler,
      maxFrameLength: Int,
      counters: TransportCounters,
      spark: SparkPipelineNames): Unit =
    install(ch.pipeline(), spark, new NettyMessageDecoder(NettyMessage.ClientToServer, maxFrameLength, null, counters),
      None, Seq("sluiceServerHandler" -> handler, "sluiceQueue" -> queue))

  def installClient(
      ch: Channel,
      handler: CreditBasedPartitionRequestClientHandler,
      maxFrameLength: Int,
      heartbeatTimeoutMs: Long,
      counters: TransportCounters,
      spark: SparkPipelineNames): Unit = {
    val decoder = new NettyMessageDecoder(NettyMessage.ServerToClient, maxFrameLength, handler, counters)
    val heartbeat = new ConnectionHeartbeat(handler.remoteAddress, handler, decoder, heartbeatTimeoutMs, counters)
    install(ch.pipeline(), spark, decoder, Some(heartbeat), Seq("sluiceClientHandler" -> handler))
  }

  private def install(p: ChannelPipeline, spark: SparkPipelineNames, decoder: NettyMessageDecoder,
      heartbeat: Option[ConnectionHeartbeat], handlers: Seq[(String, ChannelHandler)]): Unit = {
    val missing = spark.required.filter(p.get(_) == null)
    if (missing.nonEmpty) {
      throw new IllegalStateException(s"Spark's network pipeline has no ${missing.mkString(", ")} handler " +
        s"(it has ${p.names()}); Sluice was given the handler names of ${spark.source}")
    }
    p.replace(spark.encoder, "sluiceEncoder", encoder)
    p.replace(spark.frameDecoder, "sluiceDecoder", decoder)
    heartbeat.foreach(h => p.addBefore("sluiceDecoder", "sluiceHeartbeat", h))
    (spark.removed ++ spark.optional.filter(p.get(_) != null)).foreach(p.remove)
    p.replace(spark.handler, handlers.head._1, handlers.head._2)
    var previous = handlers.head._1
    handlers.tail.foreach { case (name, h) => p.addAfter(previous, name, h); previous = name }
  }

  /**
   * The application an upgrade request names: Some(Right(id)), Some(Left(why)) for a request of
   * another version of the protocol, None when `message` is no upgrade request.
   */
  def upgradeApplication(message: ByteBuffer): Option[Either[String, String]] = {
    val bytes = new Array[Byte](message.remaining())
    message.duplicate().get(bytes)
    val text = new String(bytes, StandardCharsets.UTF_8)
    if (!text.startsWith("sluice/")) None
    else if (text.startsWith(Version + " ") && text.length > Version.length + 1) Some(Right(text.substring(Version.length + 1)))
    else Some(Left(s"the client speaks ${text.takeWhile(_ != ' ')}, this server $Version: every executor, node " +
        "shuffle service and History Server of an application must run the same Sluice release"))
  }

  def isUpgradeReply(message: ByteBuffer): Boolean = {
    val bytes = new Array[Byte](message.remaining())
    message.duplicate().get(bytes)
    java.util.Arrays.equals(bytes, UpgradeReply)
  }
}

/**
 * The names of the handlers Spark's TransportContext puts in a connection's pipeline, which the
 * upgrade to the Sluice protocol replaces or removes: its message `encoder`, its `frameDecoder`,
 * the handlers in `removed` (Spark's message decoder and idle-state handler), the ones in
 * `optional` when present, and its channel `handler`. They are a private detail of Spark, so the
 * engine knows none of them: the Spark boundary passes them in (SparkInternals, which checks them
 * against a pipeline the running Spark builds at start-up). Immutable.
 *
 * @param source what the names were taken from (e.g. "Spark 4.3.0"), for error messages
 */
final case class SparkPipelineNames(
    encoder: String,
    frameDecoder: String,
    removed: Seq[String],
    optional: Seq[String],
    handler: String,
    source: String) {

  /** Every handler the upgrade needs to find. */
  def required: Seq[String] = Seq(encoder, frameDecoder) ++ removed :+ handler
}

/**
 * The server's RpcHandler: it answers the upgrade to the Sluice protocol, for an application
 * `served` serves, and the control messages `served` handles; it is reached only after Spark's
 * authentication (when it is on). Runs on the connection's event loop.
 */
private[netty] final class UpgradeRpcHandler(
    served: ServedApplications,
    onUpgrading: Channel => Unit,
    onUpgrade: (Channel, PartitionSource) => Unit,
    onConnect: Channel => Unit) extends RpcHandler {

  /**
   * `onUpgrading` runs before the reply goes out (so a client that reads the reply already finds
   * the connection counted), `onUpgrade` after it: the reply still needs Spark's encoder, which
   * the upgrade replaces. No message of the client is read in between (one event-loop turn).
   */
  override def receive(client: TransportClient, message: ByteBuffer, callback: RpcResponseCallback): Unit =
    NettyProtocol.upgradeApplication(message) match {
      case None =>
        if (!served.receiveControl(client, message, callback)) {
          callback.onFailure(new IllegalArgumentException("This is a Sluice shuffle server; it only accepts the " +
              "upgrade to the Sluice protocol"))
        }
      case Some(Left(why)) => callback.onFailure(new IllegalArgumentException(why))
      case Some(Right(appId)) =>
        served.connect(appId, Option(client.getClientId)) match {
          case Left(why) => callback.onFailure(new SecurityException(why))
          case Right(source) =>
            try {
              onUpgrading(client.getChannel)
              callback.onSuccess(ByteBuffer.wrap(NettyProtocol.UpgradeReply))
              onUpgrade(client.getChannel, source)
            } catch { case e: Throwable => client.getChannel.close(); throw e }
        }
    }

  override def channelActive(client: TransportClient): Unit = onConnect(client.getChannel)

  override def getStreamManager: StreamManager = NoStreams
}

/**
 * Spark's server bootstrap that lets `served` answer its messages sent before authentication (a
 * node service learning an application's key) and hands everything else to the handlers Spark's
 * authentication installed. Listed after Spark's own bootstraps, so it sees each message first.
 */
private[netty] final class BeforeAuthenticationBootstrap(served: ServedApplications)
  extends org.apache.spark.network.server.TransportServerBootstrap {

  override def doBootstrap(channel: Channel, inner: RpcHandler): RpcHandler = new RpcHandler {
    override def receive(client: TransportClient, message: ByteBuffer, callback: RpcResponseCallback): Unit =
      if (!served.receiveBeforeAuthentication(client, message, callback)) inner.receive(client, message, callback)
    override def receive(client: TransportClient, message: ByteBuffer): Unit = inner.receive(client, message)
    override def getStreamManager: StreamManager = inner.getStreamManager
    override def channelActive(client: TransportClient): Unit = inner.channelActive(client)
    override def channelInactive(client: TransportClient): Unit = inner.channelInactive(client)
    override def exceptionCaught(cause: Throwable, client: TransportClient): Unit = inner.exceptionCaught(cause, client)
  }
}

/** Sluice serves no Spark streams or chunks. */
private[netty] object NoStreams extends StreamManager {
  override def getChunk(streamId: Long, chunkIndex: Int): ManagedBuffer =
    throw new UnsupportedOperationException("A Sluice server serves no chunks")
}
