package io.sluice.partition.consumer

import io.sluice.partition.ResultPartitionID

/**
 * One logical channel of an input gate (Flink's InputChannel): the consumer's end of one or more
 * inputs of the gate (subpartitions of result partitions) that are all produced in one executor.
 * A pipelined partition's subpartitions are read one channel each; the finished (blocking) map
 * outputs a reduce task reads from one executor are all read through one channel, each input
 * ending with its own end of partition. [[LocalInputChannel]] reads partitions of its own executor
 * directly; a remote channel receives them over the executor pair's shared connection. The task
 * thread calls [[getNextBuffer]]; other threads only notify the gate.
 *
 * @param inputs   the gate's inputs this channel reads, in the order they are read
 * @param producer how errors name the producer: its executor and address
 */
abstract class InputChannel(
    val gate: SingleInputGate,
    val channelIndex: Int,
    val inputs: IndexedSeq[ChannelInput],
    val producer: ProducerLocation) {
  require(inputs.nonEmpty, s"channel $channelIndex reads no input")

  /** A channel of one input, whose index among the gate's inputs is the channel's. */
  def this(gate: SingleInputGate, channelIndex: Int, partitionId: ResultPartitionID, subpartitionStart: Int,
      subpartitionEnd: Int, producer: ProducerLocation) =
    this(gate, channelIndex, IndexedSeq(ChannelInput(channelIndex, partitionId, subpartitionStart, subpartitionEnd)), producer)

  /** The first input's partition and subpartitions (a channel of one input: its only one). */
  def partitionId: ResultPartitionID = inputs.head.partitionId
  def subpartitionStart: Int = inputs.head.subpartitionStart
  def subpartitionEnd: Int = inputs.head.subpartitionEnd

  @volatile private var error: Throwable = _
  @volatile private var errorInput = -1

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

  /**
   * Fails the channel from any thread; the task thread sees it at its next read. `input`: the
   * gate's input the failure is known to concern, or -1.
   */
  def setError(cause: Throwable, input: Int = -1): Unit = {
    if (error == null) { errorInput = input; error = cause }
    gate.notifyChannelNonEmpty(this)
  }

  /** Throws the channel's error: a fetch failure as an [[InputChannelException]], anything else as itself. */
  protected final def checkError(): Unit = {
    val e = error
    if (e != null) throw (if (ChannelFailure.isFetchFailure(e)) new InputChannelException(this, e, errorInput) else e)
  }

  protected final def notifyChannelNonEmpty(): Unit = gate.notifyChannelNonEmpty(this)

  def description: String =
    if (inputs.size == 1)
      s"channel $channelIndex (${partitionId}, subpartitions [$subpartitionStart, $subpartitionEnd) at $producer)"
    else s"channel $channelIndex (${inputs.size} partitions: ${partitionId} ... ${inputs.last.partitionId}, at $producer)"

  override def toString: String = s"${getClass.getSimpleName}($description)"
}

/**
 * One input a channel reads: subpartitions [start, end) of a partition, and its index among the
 * gate's inputs (how buffers and failures name it to the reader).
 */
final case class ChannelInput(index: Int, partitionId: ResultPartitionID, subpartitionStart: Int, subpartitionEnd: Int)

/**
 * Where a channel's producer's output is served: its executor id and the Sluice server to ask,
 * the executor's own or, with `node`, the node shuffle service its executor registered with
 * (which serves the output whether the executor lives or not); with `fallback`, no server: the
 * output lies in Spark's decommissioning fallback storage (read by a [[FallbackInputChannel]]);
 * with `hostLocal`, its executor runs on this host and the output is read from its file
 * ([[HostLocalPartitions]]; the gate factory decides, never the map output's location).
 */
final case class ProducerLocation(executorId: String, host: String, port: Int, node: Boolean = false,
    fallback: Boolean = false, hostLocal: Boolean = false) {
  override def toString: String =
    if (fallback) "Spark's fallback storage"
    else if (hostLocal) s"executor $executorId (its files on this host)"
    else if (node) s"executor $executorId (served by the node shuffle service at $host:$port)"
    else s"executor $executorId ($host:$port)"
}

/**
 * A channel failed: carries which channel, producer and partition, the cause, and the gate's
 * input the failure is known to concern (-1: some input of the channel not fully read yet). The
 * Spark layer turns it into a FetchFailedException for that input's map output.
 */
final class InputChannelException(val channel: InputChannel, cause: Throwable, val input: Int = -1)
  extends java.io.IOException(s"Reading ${channel.description} failed: " +
      s"${cause.getClass.getSimpleName}: ${cause.getMessage}", cause)
