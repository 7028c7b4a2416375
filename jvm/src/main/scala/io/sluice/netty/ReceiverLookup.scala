package io.sluice.netty

import io.sluice.partition.consumer.RemoteInputChannel

/** How the client's decoder finds the channel a BufferResponse is for. Thread-safe. */
private[netty] trait ReceiverLookup {

  /** The registered channel with this id, or null. */
  def channelFor(id: InputChannelID): RemoteInputChannel

  /** Whether this connection had a channel with this id that was released since. */
  def wasReleased(id: InputChannelID): Boolean
}
