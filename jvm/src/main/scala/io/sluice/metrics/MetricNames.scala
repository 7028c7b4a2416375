package io.sluice.metrics

/**
 * Flink's network and task I/O metric names, spelled exactly as Flink spells them. The JVM's
 * snapshots, Spark's metrics system, the Sluice UI tab, the JSON the driver serves and Python's
 * `sluice.metrics` columns all use these strings; Python's list of them (`python/sluice/_metrics.json`)
 * is generated from [[MetricNames.Definitions]] by `dev/gen-config`. Constants only.
 */
object MetricNames {

  /**
   * The source name under which Spark's metrics system publishes Sluice's metrics:
   * `<spark.metrics.namespace, else the application id>.<executor id>.sluice.<name>`, however
   * Sluice was switched on. Sluice never sets spark.metrics.namespace (that would rename every
   * metric of the application).
   */
  val SourceName = "sluice"

  // Buffer pool usages (Flink >= 1.9: inPoolUsage combines floating and exclusive buffers).
  val OutPoolUsage = "outPoolUsage"
  val InPoolUsage = "inPoolUsage"
  val FloatingBuffersUsage = "floatingBuffersUsage"
  val ExclusiveBuffersUsage = "exclusiveBuffersUsage"

  // Counters of the task's records, bytes and buffers.
  val NumRecordsOut = "numRecordsOut"
  val NumRecordsIn = "numRecordsIn"
  val NumBytesOut = "numBytesOut"
  val NumBytesIn = "numBytesIn"
  val NumBytesInLocal = "numBytesInLocal"
  val NumBytesInRemote = "numBytesInRemote"
  val NumBuffersOut = "numBuffersOut"
  val NumBuffersInLocal = "numBuffersInLocal"
  val NumBuffersInRemote = "numBuffersInRemote"

  // Fan-in of the task's input gates (Sluice's, beside Flink's): gates, channels, partition requests,
  // and control messages (partition requests, EndOfPartition frames and AddCredit messages).
  val NumInputGates = "numInputGates"
  val NumInputChannels = "numInputChannels"
  val NumPartitionRequests = "numPartitionRequests"
  val NumControlMessages = "numControlMessages"

  // Queue lengths (discouraged by "Flink Network Stack Vol. 2", reported for completeness).
  val OutputQueueLength = "outputQueueLength"
  val InputQueueLength = "inputQueueLength"

  // Where the task's time goes, in milliseconds per second.
  val BackPressuredTimeMsPerSecond = "backPressuredTimeMsPerSecond"
  val BusyTimeMsPerSecond = "busyTimeMsPerSecond"
  val IdleTimeMsPerSecond = "idleTimeMsPerSecond"

  // Executor-wide network memory (Flink: Status.Shuffle.Netty.*MemorySegments).
  val TotalMemorySegments = "TotalMemorySegments"
  val AvailableMemorySegments = "AvailableMemorySegments"
  val UsedMemorySegments = "UsedMemorySegments"

  // The executor's Sluice server reading partition files for remote readers (Sluice's, beside
  // Flink's): read threads alive, reads waiting for a thread or a read buffer, milliseconds reads
  // waited in all, its read memory (Flink's batch-shuffle read memory) and the descriptors of the
  // partition files it keeps open.
  val ReadThreads = "readThreads"
  val ReadQueueLength = "readQueueLength"
  val ReadWaitTimeMs = "readWaitTimeMs"
  val TotalReadMemorySegments = "TotalReadMemorySegments"
  val UsedReadMemorySegments = "UsedReadMemorySegments"
  val PartitionFileDescriptors = "partitionFileDescriptors"
  // Executor-wide index reads (Sluice's): bytes read from partition files' index files, and bytes of
  // index the readers asked for (their ranges' directory and entries, from the heap or the file).
  val IndexBytesRead = "indexBytesRead"
  val IndexBytesNeeded = "indexBytesNeeded"

  /** Latency-marker histograms (only when latency tracking is on). */
  val Latency = "latency"

  val PerSecond = "PerSecond"

  val Counters: Seq[String] = Seq(NumRecordsOut, NumRecordsIn, NumBytesOut, NumBytesIn, NumBytesInLocal,
    NumBytesInRemote, NumBuffersOut, NumBuffersInLocal, NumBuffersInRemote, NumInputGates, NumInputChannels, NumPartitionRequests,
    NumControlMessages)

  /** The meters: `<counter>PerSecond` for every counter. */
  val Rates: Seq[String] = Counters.map(_ + PerSecond)

  val Usages: Seq[String] = Seq(OutPoolUsage, InPoolUsage, FloatingBuffersUsage, ExclusiveBuffersUsage)

  val QueueLengths: Seq[String] = Seq(OutputQueueLength, InputQueueLength)

  val Times: Seq[String] = Seq(BackPressuredTimeMsPerSecond, BusyTimeMsPerSecond, IdleTimeMsPerSecond)

  /** Every per-task metric, in the order tables show them. */
  val TaskMetrics: Seq[String] = Usages ++ Counters ++ Rates ++ QueueLengths ++ Times

  val ExecutorMetrics: Seq[String] = Seq(TotalMemorySegments, AvailableMemorySegments, UsedMemorySegments)

  val ServerMetrics: Seq[String] = Seq(ReadThreads, ReadQueueLength, ReadWaitTimeMs, TotalReadMemorySegments,
    UsedReadMemorySegments, PartitionFileDescriptors)

  /** The executor's own counters (not summed over tasks), exported beside the task counters' totals. */
  val ExecutorCounters: Seq[String] = Seq(IndexBytesRead, IndexBytesNeeded)

  /**
   * A metric as Python's `sluice.metrics` table and Spark's metrics system see it.
   *
   * @param scope      "task" (a column of `sluice.metrics`; summed or maxed per executor in Spark's
   *                   metrics system) or "executor" (Spark's metrics system only)
   * @param valueType  "long", "int" or "double"
   * @param sparkKind  how Spark's metrics system exports it: "counter", "gauge" or "histogram"
   */
  final case class Definition(name: String, scope: String, valueType: String, sparkKind: String)

  /** Every metric, per-task ones in [[TaskMetrics]] order, then the executor's and its server's. */
  val Definitions: Seq[Definition] =
    Usages.map(Definition(_, "task", "double", "gauge")) ++
      Counters.map(Definition(_, "task", "long", "counter")) ++
      Rates.map(Definition(_, "task", "double", "gauge")) ++
      QueueLengths.map(Definition(_, "task", "long", "gauge")) ++
      Times.map(Definition(_, "task", "double", "gauge")) ++
      ExecutorMetrics.map(Definition(_, "executor", "int", "gauge")) ++
      ServerMetrics.map(Definition(_, "executor", "long", "gauge")) ++
      ExecutorCounters.map(Definition(_, "executor", "long", "counter")) :+
      Definition(Latency, "executor", "double", "histogram")
}
