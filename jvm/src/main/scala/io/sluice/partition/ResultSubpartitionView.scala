package io.sluice.partition

/**
 * A reader's cursor over one subpartition or a range of them (Flink's ResultSubpartitionView).
 * Used by one thread at a time: a Netty event loop serving a remote consumer, or the task thread
 * of a local consumer. The producer side notifies the view's [[BufferAvailabilityListener]].
 */
trait ResultSubpartitionView {

  /** The next buffer, the end of the partition, or null when nothing is ready now. */
  def getNextBuffer(): BufferAndBacklog

  /** Whether [[getNextBuffer]] would return something given `credits` (end of partition needs none). */
  def isAvailable(credits: Int): Boolean

  /** Buffers ready to be read now (the backlog announced with an empty credit). */
  def backlog: Int

  def releaseAllResources(): Unit

  def isReleased: Boolean

  /** Why the producer failed, if it did; readers turn it into an error for their consumer. */
  def failureCause: Throwable
}
