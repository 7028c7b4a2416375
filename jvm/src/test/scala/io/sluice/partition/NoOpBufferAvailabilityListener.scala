package io.sluice.partition

/** A listener for readers that poll: it ignores every notification. */
object NoOpBufferAvailabilityListener extends BufferAvailabilityListener {
  override def notifyDataAvailable(): Unit = ()
}
