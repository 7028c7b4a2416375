package io.sluice.metrics

/** Builds task snapshots for tests of the driver-side logic: every metric 0 unless given. */
object TestingSnapshots {
  private var nextId = 0L

  def task(
      stageId: Int = 1,
      partitionId: Int = 0,
      running: Boolean = true,
      outputType: String = "",
      outPoolUsage: Double = 0,
      floatingBuffersUsage: Double = 0,
      exclusiveBuffersUsage: Double = 0,
      inPoolUsage: Double = -1,
      numRecordsIn: Long = 0,
      numBytesInLocal: Long = 0,
      numBytesInRemote: Long = 0,
      numBuffersInLocal: Long = 0,
      numBuffersInRemote: Long = 0,
      taskAttemptId: Long = -1): TaskIOSnapshot = {
    val tid = if (taskAttemptId >= 0) taskAttemptId else synchronized { nextId += 1; nextId + 100000 }
    TaskIOSnapshot(TaskKey(stageId, 0, partitionId, tid), running, 0L, 0L, outputType,
      outPoolUsage = outPoolUsage,
      inPoolUsage = if (inPoolUsage >= 0) inPoolUsage else math.max(floatingBuffersUsage, exclusiveBuffersUsage),
      floatingBuffersUsage = floatingBuffersUsage, exclusiveBuffersUsage = exclusiveBuffersUsage,
      numRecordsOut = 0, numRecordsIn = numRecordsIn, numBytesOut = 0, numBytesIn = numBytesInLocal + numBytesInRemote,
      numBytesInLocal = numBytesInLocal, numBytesInRemote = numBytesInRemote, numBuffersOut = 0,
      numBuffersInLocal = numBuffersInLocal, numBuffersInRemote = numBuffersInRemote,
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, Nil, None)
  }

  /** A consumer task that read something (so it counts as reading input). */
  def consumer(stageId: Int = 2, partitionId: Int = 0, floating: Double = 0, exclusive: Double = 0,
      remote: Boolean = true, outPoolUsage: Double = 0, outputType: String = "",
      inPoolUsage: Double = -1): TaskIOSnapshot =
    task(stageId, partitionId, outputType = outputType, outPoolUsage = outPoolUsage,
      floatingBuffersUsage = floating, exclusiveBuffersUsage = exclusive, inPoolUsage = inPoolUsage,
      numRecordsIn = 10, numBytesInLocal = if (remote) 0 else 1000, numBytesInRemote = if (remote) 1000 else 0,
      numBuffersInLocal = if (remote) 0 else 1, numBuffersInRemote = if (remote) 1 else 0)

  def producer(stageId: Int = 1, partitionId: Int = 0, outPoolUsage: Double = 0,
      outputType: String = "pipelined"): TaskIOSnapshot =
    task(stageId, partitionId, outputType = outputType, outPoolUsage = outPoolUsage)
}
