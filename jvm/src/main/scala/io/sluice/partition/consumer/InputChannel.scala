package io.sluice.partition.consumer

import io.sluice.partition.ResultPartitionID

/**
 * One logical channel of an input gate: the consumer's end of one producer's subpartitions
 * [subpartitionStart, subpartitionEnd) (Flink's InputChannel). [[LocalInputChannel]] reads a
 * partition of its own executor directly; a remote channel receives it over the executor pair's
 * shared connection. The task thread calls [[getNextBuffer]]; other threads only notify the gate.
 *
 * @param producer how errors name the producer: its executor and address
 */
abstract class InputChannel(
    val gate: SingleInputGate,
    val channelIndex: Int,
    val partitionId: ResultPartitionID,
    val subpartitionStart: Int,
    val subpartitionEnd: Int,
    val producer: ProducerLocation) {

  @volatile private var error: Throwable = _

  /** Starts the channel: opens the view (local) or sends the partition request (remote). */
  def requestSubpartitions(): Unit

  /** The next buffer or the end, null when nothing is there now; throws the channel's error. */
  def getNextBuffer(): BufferAndAvailability

  /** Gives back everything the channel holds; called once, when it ended or the gate closes. */
  def releaseAllResources(): Unit

  def isRemote: Boolean

  /** Buffers waiting in this channel (inputQueueLength; always 0 for local channels, FLINK-12576). */
  def numQueuedBuffers: Int = 0

  // Metric hooks a remote channel overrides (Flink's RemoteInputChannel gauges); a local channel
  // holds no buffers of its own, so it reports none. Read from the metrics thread without locking:
  // best-effort values, as in Flink.

  /** Exclusive buffers this channel owns (its initial credit); 0 for local channels. */
  def numExclusiveBuffers: Int = 0

  /** Exclusive buffers currently holding data or lent to the reader. */
  def numExclusiveBuffersUsed: Int = 0

  /** Floating buffers this channel took from the gate's pool but has not filled yet. */
  def numFloatingBuffersAvailable: Int = 0

  /** Fails the channel from any thread; the task thread sees it at its next read. */
  def setError(cause: Throwable): Unit = {
    if (error == null) error = cause
    gate.notifyChannelNonEmpty(this)
  }

  protected final def checkError(): Unit = {
    val e = error
    if (e != null) throw new InputChannelException(this, e)
  }

  protected final def notifyChannelNonEmpty(): Unit = gate.notifyChannelNonEmpty(this)

  def description: String =
    s"channel $channelIndex (${partitionId}, subpartitions [$subpartitionStart, $subpartitionEnd) at $producer)"

  override def toString: String = s"${getClass.getSimpleName}($description)"
}

/** Where a channel's producer runs: its executor id and its Sluice server. */
final case class ProducerLocation(executorId: String, host: String, port: Int) {
  override def toString: String = s"executor $executorId ($host:$port)"
}

/**
 * A channel failed: carries which channel, producer and partition, and the cause. The Spark
 * layer turns it into a FetchFailedException for that map output.
 */
final class InputChannelException(val channel: InputChannel, cause: Throwable)
  extends java.io.IOException(s"Reading ${channel.description} failed: " +
    s"${cause.getClass.getSimpleName}: ${cause.getMessage}", cause)
