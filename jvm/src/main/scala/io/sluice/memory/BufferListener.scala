package io.sluice.memory

/**
 * Waits for a buffer of a [[LocalBufferPool]] that had none (Flink's BufferListener): a remote
 * input channel waiting for floating buffers, or a credit-less client that paused reading.
 * Called on the thread that recycled the buffer, without the pool's lock held.
 */
trait BufferListener {

  /**
   * Offers `buffer`. Returns true to take it (the listener now owns it); false hands it back to
   * the pool and unregisters the listener.
   */
  def notifyBufferAvailable(buffer: NetworkBuffer): Boolean

  /** The pool was destroyed; no buffer will come. */
  def notifyBufferDestroyed(): Unit
}
