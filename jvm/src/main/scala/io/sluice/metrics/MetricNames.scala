package io.sluice.metrics

/**
 * Flink's network and task I/O metric names, spelled exactly as Flink spells them. The JVM's
 * snapshots, Spark's metrics system, the Sluice UI tab, the JSON the driver serves and Python's
 * `sluice.metrics` columns all use these strings. Constants only.
 */
object MetricNames {
  // Buffer pool usages (Flink >= 1.9: inPoolUsage combines floating and exclusive buffers).
  val OutPoolUsage = "outPoolUsage"
  val InPoolUsage = "inPoolUsage"
  val FloatingBuffersUsage = "floatingBuffersUsage"
  val ExclusiveBuffersUsage = "exclusiveBuffersUsage"

  // Counters of the task's records, bytes and buffers.
  val NumRecordsOut = "numRecordsOut"
  val NumRecordsIn = "numRecordsIn"
  val NumBytesOut = "numBytesOut"
  val NumBytesInLocal = "numBytesInLocal"
  val NumBytesInRemote = "numBytesInRemote"
  val NumBuffersOut = "numBuffersOut"
  val NumBuffersInLocal = "numBuffersInLocal"
  val NumBuffersInRemote = "numBuffersInRemote"

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

  /** Latency-marker histograms (only when latency tracking is on). */
  val Latency = "latency"

  val PerSecond = "PerSecond"

  val Counters: Seq[String] = Seq(NumRecordsOut, NumRecordsIn, NumBytesOut, NumBytesInLocal, NumBytesInRemote,
    NumBuffersOut, NumBuffersInLocal, NumBuffersInRemote)

  /** The meters: `<counter>PerSecond` for every counter. */
  val Rates: Seq[String] = Counters.map(_ + PerSecond)

  val Usages: Seq[String] = Seq(OutPoolUsage, InPoolUsage, FloatingBuffersUsage, ExclusiveBuffersUsage)

  val QueueLengths: Seq[String] = Seq(OutputQueueLength, InputQueueLength)

  val Times: Seq[String] = Seq(BackPressuredTimeMsPerSecond, BusyTimeMsPerSecond, IdleTimeMsPerSecond)

  /** Every per-task metric, in the order tables show them. */
  val TaskMetrics: Seq[String] = Usages ++ Counters ++ Rates ++ QueueLengths ++ Times

  val ExecutorMetrics: Seq[String] = Seq(TotalMemorySegments, AvailableMemorySegments, UsedMemorySegments)
}
