package io.sluice.netty

import java.util.concurrent.{ScheduledFuture, TimeUnit}

import io.netty.channel.{ChannelHandlerContext, ChannelInboundHandlerAdapter}
import io.sluice.config.{SluiceConf, SluiceOptions}
import org.slf4j.LoggerFactory

/**
 * The client's watch over the peer of one connection (what Spark's TransportChannelHandler does
 * with the IdleStateHandler that Sluice's pipeline removes; Flink has no counterpart and relies on
 * the JobManager's heartbeat). While at least one input channel reads over the connection, it sends
 * a [[Ping]] whenever nothing has arrived for a quarter of `timeoutMs`; once nothing at all (no
 * data, no [[Pong]]) has arrived for `timeoutMs`, the peer is declared hung and the connection fails
 * with a [[RemoteTransportException]] naming the peer, the silence and the setting, so every channel
 * on it fails and Spark recomputes the peer's map outputs.
 *
 * Silence on the data path alone is no hang signal: with credit-based flow control a healthy
 * sender without credit, or a pipelined partition without records, sends nothing for as long as it
 * likes; only an unanswered heartbeat is. A connection without channels is neither pinged nor
 * declared dead, and silence does not count while the client itself stopped reading (credit-less
 * mode, the decoder waiting for a buffer). It sits in front of the decoder, so every byte counts,
 * partial frames included. Confined to the connection's event loop.
 */
private[netty] final class ConnectionHeartbeat(
    remoteAddress: String,
    handler: CreditBasedPartitionRequestClientHandler,
    decoder: NettyMessageDecoder,
    timeoutMs: Long,
    counters: TransportCounters) extends ChannelInboundHandlerAdapter {

  import ConnectionHeartbeat._

  private val timeoutNanos = TimeUnit.MILLISECONDS.toNanos(timeoutMs)
  private val intervalNanos = math.max(timeoutNanos / 4, MinIntervalNanos)
  private var ctx: ChannelHandlerContext = _
  private var lastReadNanos = System.nanoTime()
  private var readSinceComplete = false
  private var unansweredPings = 0
  private var nextSequenceNumber = 0L
  private var tick: ScheduledFuture[_] = _

  private val check: Runnable = () => onTick()

  override def handlerAdded(ctx: ChannelHandlerContext): Unit = {
    this.ctx = ctx
    lastReadNanos = System.nanoTime()
    schedule()
  }

  override def channelRead(ctx: ChannelHandlerContext, msg: AnyRef): Unit = {
    readSinceComplete = true
    ctx.fireChannelRead(msg)
  }

  /** Once per batch of reads, as Netty's IdleStateHandler: the clock is read once, not per buffer. */
  override def channelReadComplete(ctx: ChannelHandlerContext): Unit = {
    if (readSinceComplete) {
      readSinceComplete = false
      lastReadNanos = System.nanoTime()
      unansweredPings = 0
    }
    ctx.fireChannelReadComplete()
  }

  override def channelInactive(ctx: ChannelHandlerContext): Unit = {
    cancel()
    ctx.fireChannelInactive()
  }

  override def handlerRemoved(ctx: ChannelHandlerContext): Unit = cancel()

  private def schedule(): Unit =
    if (ctx.channel().isActive) tick = ctx.executor().schedule(check, intervalNanos, TimeUnit.NANOSECONDS)

  private def cancel(): Unit = if (tick != null) { tick.cancel(false); tick = null }

  private def onTick(): Unit = {
    tick = null
    if (!ctx.channel().isActive) return
    val now = System.nanoTime()
    if (handler.numChannels == 0 || decoder.isStalled) lastReadNanos = now // nothing is owed to us
    else {
      val silence = now - lastReadNanos
      if (silence >= timeoutNanos) { declareHung(silence); return }
      if (silence >= intervalNanos && ctx.channel().isWritable) {
        unansweredPings += 1
        counters.pingsSent.increment()
        ctx.writeAndFlush(Ping(nextSequenceNumber))
        nextSequenceNumber += 1
      }
    }
    schedule()
  }

  private def declareHung(silenceNanos: Long): Unit = {
    counters.hungConnections.increment()
    val e = new RemoteTransportException(s"The Sluice server at $remoteAddress sent nothing for " +
      s"${TimeUnit.NANOSECONDS.toMillis(silenceNanos)}ms (no data, no answer to $unansweredPings heartbeats) while " +
      s"${handler.numChannels} channels read from it: declaring it hung and closing the connection " +
      s"(spark.sluice.network.heartbeatTimeout=${timeoutMs}ms; 0 follows spark.network.timeout)")
    log.warn(e.getMessage)
    ctx.fireExceptionCaught(e) // the client handler fails every channel and closes the connection
  }
}

private[netty] object ConnectionHeartbeat {
  private val log = LoggerFactory.getLogger(classOf[ConnectionHeartbeat])

  /** Spark's default spark.network.timeout: what a heartbeat timeout of 0 means without the Spark layer. */
  val DefaultTimeoutMs: Long = 120000L

  /** spark.sluice.network.heartbeatTimeout, with 0 (follow spark.network.timeout) as Spark's default. */
  def timeoutMs(conf: SluiceConf): Long = {
    val t = conf.get(SluiceOptions.HeartbeatTimeout)
    if (t > 0) t else DefaultTimeoutMs
  }

  private val MinIntervalNanos = TimeUnit.MILLISECONDS.toNanos(10)
}
