package io.sluice.netty

import java.io.ByteArrayOutputStream
import java.nio.channels.Channels

import io.netty.buffer.{ByteBuf, Unpooled}
import io.netty.channel.FileRegion
import io.netty.channel.embedded.EmbeddedChannel
import io.sluice.memory.NetworkBufferPool
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.{InputChannel, ProducerLocation, RemoteInputChannel, SingleInputGate}

/**
 * A client-side decoder's world without a network: one gate with remote channels that never
 * connect, registered in a [[ReceiverLookup]], over a small NetworkBufferPool. For decoder and
 * protocol tests on Netty's EmbeddedChannel.
 */
final class TestingReceivers(numChannels: Int = 1, creditBased: Boolean = false, gateBuffers: Int = 8,
    exclusive: Int = 2) extends ReceiverLookup {

  val networkBufferPool = new NetworkBufferPool(64, 4096)
  val gate = new SingleInputGate("test gate", networkBufferPool, networkBufferPool.createBufferPool(1, gateBuffers, "test gate"),
    None, 10000, 10000)
  val channels: IndexedSeq[RemoteInputChannel] = (0 until numChannels).map { i =>
    new RemoteInputChannel(gate, i, ResultPartitionID(1, i), 0, 1, ProducerLocation("P", "127.0.0.1", 1),
      _ => throw new IllegalStateException("no network here"), creditBased, exclusive, false, 10000)
  }
  gate.setChannels(channels.toArray[InputChannel])
  // Credit-based channels take their exclusive buffers here; their connection attempt fails, harmlessly.
  if (creditBased) channels.foreach(_.requestSubpartitions())
  private val released = scala.collection.mutable.Set.empty[InputChannelID]
  val counters = new TransportCounters

  override def channelFor(id: InputChannelID): RemoteInputChannel = channels.find(c => c.id == id && !released(id)).orNull

  override def wasReleased(id: InputChannelID): Boolean = released(id)

  def release(channel: RemoteInputChannel): Unit = { released += channel.id; channel.releaseAllResources() }

  /** A client decoder (and nothing after it) on an EmbeddedChannel. */
  def clientChannel(maxFrameLength: Int = 64 << 10): EmbeddedChannel =
    new EmbeddedChannel(new NettyMessageDecoder(NettyMessage.ServerToClient, maxFrameLength, this, counters))

  def close(): Unit = gate.close()
}

object TestingReceivers {

  /** A server decoder on an EmbeddedChannel. */
  def serverChannel(counters: TransportCounters = new TransportCounters, maxFrameLength: Int = 64 << 10): EmbeddedChannel =
    new EmbeddedChannel(new NettyMessageDecoder(NettyMessage.ClientToServer, maxFrameLength, null, counters))

  /** Everything an encoder wrote, as bytes (ByteBufs and FileRegions are released). */
  def encode(messages: NettyMessage*): Array[Byte] = {
    val ch = new EmbeddedChannel(new NettyMessageEncoder)
    messages.foreach(m => ch.writeOutbound(m))
    val out = new ByteArrayOutputStream()
    var o: AnyRef = ch.readOutbound[AnyRef]()
    while (o != null) {
      o match {
        case b: ByteBuf =>
          val a = new Array[Byte](b.readableBytes()); b.readBytes(a); out.write(a); b.release()
        case r: FileRegion =>
          val target = Channels.newChannel(out)
          while (r.transferred() < r.count()) r.transferTo(target, r.transferred())
          r.release()
      }
      o = ch.readOutbound[AnyRef]()
    }
    ch.finishAndReleaseAll()
    out.toByteArray
  }

  def bytes(a: Array[Byte]): ByteBuf = Unpooled.wrappedBuffer(a)
}
