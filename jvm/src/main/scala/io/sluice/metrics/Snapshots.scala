package io.sluice.metrics

/**
 * Which task attempt a metric group belongs to: the engine knows tasks only by these numbers (the
 * Spark layer fills them from its TaskContext). Immutable.
 */
final case class TaskKey(stageId: Int, stageAttemptId: Int, partitionId: Int, taskAttemptId: Long) {
  override def toString: String = s"task $partitionId.$stageAttemptId of stage $stageId (TID $taskAttemptId)"
}

/**
 * One latency histogram's statistics, in milliseconds. `sourceStage` / `sourceIndex` say which
 * producers fed it: -1 where the granularity does not split by them (single: both; operator:
 * the index). Immutable.
 */
final case class LatencySnapshot(
    sourceStage: Int,
    sourceIndex: Int,
    count: Long,
    min: Double,
    max: Double,
    mean: Double,
    p50: Double,
    p95: Double,
    p99: Double,
    p999: Double)

/**
 * What one task attempt's network I/O looked like at `timestampMillis`, under Flink's metric names
 * (see [[MetricNames]]). Counters are totals since the task started; rates are per second over the
 * meter window; usages are fractions in [0, 1]; times are milliseconds per second.
 *
 * For a finished task (`running == false`) counters and rates are final, while pool usages and
 * queue lengths are those last sampled while it ran (its pools are gone once it ends).
 * `latency` (one entry per histogram of the granularity) is empty and `latencyTotal` (all of the
 * task's markers together) None unless latency tracking was on for the task. Immutable.
 *
 * @param outputType the type of the task's result partition ("blocking", "pipelined"), "" if it wrote none
 * @param bufferTimeoutMs the buffer timeout in effect for a pipelined result partition (0: flush
 *                        after every record, -1: only full buffers); None for other tasks
 * @param bufferWaitMs time the task waited for network buffers (see [[io.sluice.memory.BufferRequestWaits]])
 * @param inputWaitByProducerMs time the task's readers waited for input, by the producing executor
 *                              whose channel ended each wait
 */
final case class TaskIOSnapshot(
    key: TaskKey,
    running: Boolean,
    startedAtMillis: Long,
    timestampMillis: Long,
    outputType: String,
    outPoolUsage: Double,
    inPoolUsage: Double,
    floatingBuffersUsage: Double,
    exclusiveBuffersUsage: Double,
    numRecordsOut: Long,
    numRecordsIn: Long,
    numBytesOut: Long,
    numBytesIn: Long,
    numBytesInLocal: Long,
    numBytesInRemote: Long,
    numBuffersOut: Long,
    numBuffersInLocal: Long,
    numBuffersInRemote: Long,
    numRecordsOutPerSecond: Double,
    numRecordsInPerSecond: Double,
    numBytesOutPerSecond: Double,
    numBytesInPerSecond: Double,
    numBytesInLocalPerSecond: Double,
    numBytesInRemotePerSecond: Double,
    numBuffersOutPerSecond: Double,
    numBuffersInLocalPerSecond: Double,
    numBuffersInRemotePerSecond: Double,
    outputQueueLength: Int,
    inputQueueLength: Int,
    backPressuredTimeMsPerSecond: Double,
    busyTimeMsPerSecond: Double,
    idleTimeMsPerSecond: Double,
    latency: Seq[LatencySnapshot],
    latencyTotal: Option[LatencySnapshot],
    bufferTimeoutMs: Option[Long] = None,
    numInputGates: Long = 0,
    numInputChannels: Long = 0,
    numPartitionRequests: Long = 0,
    numControlMessages: Long = 0,
    numInputGatesPerSecond: Double = 0,
    numInputChannelsPerSecond: Double = 0,
    numPartitionRequestsPerSecond: Double = 0,
    numControlMessagesPerSecond: Double = 0,
    bufferWaitMs: Long = 0,
    inputWaitByProducerMs: Map[String, Long] = Map.empty) {

  /** Every metric by its Flink name, in [[MetricNames.TaskMetrics]] order. */
  def metrics: Seq[(String, AnyVal)] = Seq(
    MetricNames.OutPoolUsage -> outPoolUsage,
    MetricNames.InPoolUsage -> inPoolUsage,
    MetricNames.FloatingBuffersUsage -> floatingBuffersUsage,
    MetricNames.ExclusiveBuffersUsage -> exclusiveBuffersUsage,
    MetricNames.NumRecordsOut -> numRecordsOut,
    MetricNames.NumRecordsIn -> numRecordsIn,
    MetricNames.NumBytesOut -> numBytesOut,
    MetricNames.NumBytesIn -> numBytesIn,
    MetricNames.NumBytesInLocal -> numBytesInLocal,
    MetricNames.NumBytesInRemote -> numBytesInRemote,
    MetricNames.NumBuffersOut -> numBuffersOut,
    MetricNames.NumBuffersInLocal -> numBuffersInLocal,
    MetricNames.NumBuffersInRemote -> numBuffersInRemote,
    MetricNames.NumInputGates -> numInputGates,
    MetricNames.NumInputChannels -> numInputChannels,
    MetricNames.NumPartitionRequests -> numPartitionRequests,
    MetricNames.NumControlMessages -> numControlMessages,
    "numRecordsOutPerSecond" -> numRecordsOutPerSecond,
    "numRecordsInPerSecond" -> numRecordsInPerSecond,
    "numBytesOutPerSecond" -> numBytesOutPerSecond,
    "numBytesInPerSecond" -> numBytesInPerSecond,
    "numBytesInLocalPerSecond" -> numBytesInLocalPerSecond,
    "numBytesInRemotePerSecond" -> numBytesInRemotePerSecond,
    "numBuffersOutPerSecond" -> numBuffersOutPerSecond,
    "numBuffersInLocalPerSecond" -> numBuffersInLocalPerSecond,
    "numBuffersInRemotePerSecond" -> numBuffersInRemotePerSecond,
    "numInputGatesPerSecond" -> numInputGatesPerSecond,
    "numInputChannelsPerSecond" -> numInputChannelsPerSecond,
    "numPartitionRequestsPerSecond" -> numPartitionRequestsPerSecond,
    "numControlMessagesPerSecond" -> numControlMessagesPerSecond,
    MetricNames.OutputQueueLength -> outputQueueLength,
    MetricNames.InputQueueLength -> inputQueueLength,
    MetricNames.BackPressuredTimeMsPerSecond -> backPressuredTimeMsPerSecond,
    MetricNames.BusyTimeMsPerSecond -> busyTimeMsPerSecond,
    MetricNames.IdleTimeMsPerSecond -> idleTimeMsPerSecond)

  /** Whether the task read any Sluice input or wrote any Sluice output. */
  def readsInput: Boolean = numBuffersInLocal + numBuffersInRemote > 0 || numRecordsIn > 0
  def writesOutput: Boolean = outputType.nonEmpty
}

/** The executor's network memory: Flink's Total/Available/UsedMemorySegments. Immutable. */
final case class SegmentsSnapshot(segmentSize: Int, total: Int, available: Int, used: Int)

/**
 * The executor's transport: its Sluice server's port, the connections other executors opened to
 * it, the connections it holds to others (one per remote executor) and how many it opened since it
 * started (a closed one opened again counts twice); and its server's reads of partition files
 * ([[ServerReadSnapshot]]). Immutable.
 */
final case class TransportSnapshot(serverPort: Int, serverConnections: Int, clientConnections: Int,
    reads: ServerReadSnapshot = ServerReadSnapshot.none, clientConnectionsOpened: Long = 0L)

object TransportSnapshot {
  val none: TransportSnapshot = TransportSnapshot(0, 0, 0)
}

/**
 * The executor's Sluice server reading partition files for remote readers, under the names of
 * [[MetricNames.ServerMetrics]]: its read threads alive, the reads waiting for a thread or a read
 * buffer, the milliseconds reads waited in all, its read memory (segments, those holding frames)
 * and the file descriptors of the partition files it keeps open. Immutable.
 */
final case class ServerReadSnapshot(threads: Int, queueLength: Int, waitTimeMs: Long, totalSegments: Int,
    usedSegments: Int, fileDescriptors: Int) {

  /** The values by metric name. */
  def values: Seq[(String, Long)] = Seq(MetricNames.ReadThreads -> threads.toLong,
    MetricNames.ReadQueueLength -> queueLength.toLong, MetricNames.ReadWaitTimeMs -> waitTimeMs,
    MetricNames.TotalReadMemorySegments -> totalSegments.toLong, MetricNames.UsedReadMemorySegments -> usedSegments.toLong,
    MetricNames.PartitionFileDescriptors -> fileDescriptors.toLong)

  /** This executor's and `o`'s together (the application's, on the driver). */
  def +(o: ServerReadSnapshot): ServerReadSnapshot = ServerReadSnapshot(threads + o.threads, queueLength + o.queueLength,
    waitTimeMs + o.waitTimeMs, totalSegments + o.totalSegments, usedSegments + o.usedSegments,
    fileDescriptors + o.fileDescriptors)
}

object ServerReadSnapshot {
  val none: ServerReadSnapshot = ServerReadSnapshot(0, 0, 0L, 0, 0, 0)
}

/**
 * Everything an executor reports at one tick: its network memory, its running tasks, the tasks
 * that finished since its previous report (or all retained ones, for a local view), and its
 * totals of every counter over all tasks it ran with their rates (by Flink name). Immutable.
 */
final case class ExecutorSnapshot(
    executorId: String,
    timestampMillis: Long,
    segments: SegmentsSnapshot,
    tasks: Seq[TaskIOSnapshot],
    totals: Map[String, Long] = Map.empty,
    rates: Map[String, Double] = Map.empty,
    transport: TransportSnapshot = TransportSnapshot.none)
