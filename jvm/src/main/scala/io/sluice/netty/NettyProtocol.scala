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
 * own. Once a connection is up (and authenticated), the client sends one RPC, [[UpgradeRequest]];
 * the server's RpcHandler, which Spark's AuthRpcHandler only lets through after authentication,
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

  val UpgradeRequest: Array[Byte] = "sluice/1".getBytes(StandardCharsets.US_ASCII)
  val UpgradeReply: Array[Byte] = "sluice/1 ok".getBytes(StandardCharsets.US_ASCII)

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

  def isUpgradeRequest(message: ByteBuffer): Boolean = {
    val bytes = new Array[Byte](message.remaining())
    message.duplicate().get(bytes)
    java.util.Arrays.equals(bytes, UpgradeRequest)
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
 * The server's RpcHandler: it answers nothing but the upgrade to the Sluice protocol, and reaches
 * that only after Spark's authentication (when it is on). Runs on the connection's event loop.
 */
private[netty] final class UpgradeRpcHandler(
    onUpgrading: Channel => Unit,
    onUpgrade: Channel => Unit,
    onConnect: Channel => Unit) extends RpcHandler {

  /**
   * `onUpgrading` runs before the reply goes out (so a client that reads the reply already finds
   * the connection counted), `onUpgrade` after it: the reply still needs Spark's encoder, which
   * the upgrade replaces. No message of the client is read in between (one event-loop turn).
   */
  override def receive(client: TransportClient, message: ByteBuffer, callback: RpcResponseCallback): Unit = {
    if (!NettyProtocol.isUpgradeRequest(message)) {
      callback.onFailure(new IllegalArgumentException("This is a Sluice shuffle server; it only accepts the " +
          "upgrade to the Sluice protocol"))
    } else {
      try {
        onUpgrading(client.getChannel)
        callback.onSuccess(ByteBuffer.wrap(NettyProtocol.UpgradeReply))
        onUpgrade(client.getChannel)
      } catch { case e: Throwable => client.getChannel.close(); throw e }
    }
  }

  override def channelActive(client: TransportClient): Unit = onConnect(client.getChannel)

  override def getStreamManager: StreamManager = NoStreams
}

/** Sluice serves no Spark streams or chunks. */
private[netty] object NoStreams extends StreamManager {
  override def getChunk(streamId: Long, chunkIndex: Int): ManagedBuffer =
    throw new UnsupportedOperationException("A Sluice server serves no chunks")
}
