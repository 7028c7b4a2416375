package io.sluice.partition

/**
 * Told when a subpartition view has something to read (Flink's BufferAvailabilityListener): the
 * server's view reader, which queues itself for the Netty writer, or a local input channel, which
 * queues itself at its input gate. Called on the producer's or the flusher's thread, without
 * locks held; implementations only enqueue.
 */
trait BufferAvailabilityListener {
  def notifyDataAvailable(): Unit
}
