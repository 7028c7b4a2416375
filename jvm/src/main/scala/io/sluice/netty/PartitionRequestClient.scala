package io.sluice.netty

import java.net.InetSocketAddress

import io.netty.channel.{Channel, ChannelFuture, ChannelFutureListener}
import io.sluice.partition.consumer.RemoteInputChannel

/**
 * The executor's one connection to another executor's Sluice server (Flink's
 * NettyPartitionRequestClient), shared by every remote input channel of every gate that reads from
 * there and kept across shuffles. Channels send their partition requests and cancellations
 * through it and ask it to announce credit. Thread-safe: writes are handed to the event loop.
 */
final class PartitionRequestClient private[netty] (
    private[netty] val channel: Channel,
    private[netty] val handler: CreditBasedPartitionRequestClientHandler,
    val remote: InetSocketAddress) {

  /** Registers `ch` and sends its request (a MultiPartitionRequest when it is packed) with its initial credit. */
  def requestSubpartitions(ch: RemoteInputChannel, initialCredit: Int, creditBased: Boolean, waitForProducer: Boolean): Unit = {
    handler.addInputChannel(ch)
    val request =
      if (ch.packed) {
        MultiPartitionRequest(ch.id, initialCredit, creditBased,
          ch.inputs.map(in => RequestedSubpartitions(in.partitionId, in.subpartitionStart, in.subpartitionEnd)),
          if (ch.producer.node) Some(ch.producer.executorId) else None)
      } else {
        PartitionRequest(ch.partitionId, ch.subpartitionStart, ch.subpartitionEnd, ch.id, initialCredit, creditBased,
          waitForProducer)
      }
    channel.writeAndFlush(request).addListener(new ChannelFutureListener {
      override def operationComplete(f: ChannelFuture): Unit = if (!f.isSuccess) {
        handler.removeInputChannel(ch)
        ch.onConnectionError(new RemoteTransportException(s"Sending the partition request to $remoteString failed", f.cause()))
      }
    })
  }

  /** The channel has credit to announce (any thread). */
  def notifyCreditAvailable(ch: RemoteInputChannel): Unit = handler.notifyCreditAvailable(ch)

  /** The channel was released: forget it and, unless it had ended, tell the server to stop. */
  def cancelRequest(ch: RemoteInputChannel, sendCancel: Boolean): Unit = {
    handler.removeInputChannel(ch)
    if (sendCancel && channel.isActive) channel.writeAndFlush(CancelPartitionRequest(ch.id))
  }

  def isActive: Boolean = channel.isActive

  /** The connection's local address (its socket's side on this executor), or null once closed. */
  def localAddress: java.net.SocketAddress = channel.localAddress()

  /** Channels currently reading over this connection. */
  def numChannels: Int = handler.numChannels

  def remoteString: String = s"${remote.getHostString}:${remote.getPort}"

  /** Says goodbye to the server and closes the connection (executor shutdown). */
  private[netty] def close(): ChannelFuture =
    if (channel.isActive) channel.writeAndFlush(CloseRequest).addListener(ChannelFutureListener.CLOSE)
    else channel.close()

  override def toString: String = s"PartitionRequestClient($remoteString, ${numChannels} channels, active=$isActive)"
}
