package io.sluice.metrics

/**
 * The backpressure monitor's verdict for a ratio of blocked samples (Flink's
 * JobVertexBackPressureInfo levels): OK up to 10 %, LOW up to 50 %, HIGH above.
 */
sealed abstract class BackPressureLevel(val name: String) {
  override def toString: String = name
}

object BackPressureLevel {
  case object Ok extends BackPressureLevel("OK")
  case object Low extends BackPressureLevel("LOW")
  case object High extends BackPressureLevel("HIGH")

  val OkMax = 0.10
  val LowMax = 0.5

  def of(ratio: Double): BackPressureLevel =
    if (ratio <= OkMax) Ok else if (ratio <= LowMax) Low else High
}

/** A request from the driver to sample the running tasks of one stage. Immutable. */
final case class SampleRequest(requestId: Long, stageId: Int, numSamples: Int, delayBetweenSamplesMs: Long)

/** How many of a task's stack-trace samples were blocked on a buffer request. Immutable. */
final case class TaskSample(key: TaskKey, blocked: Int, total: Int) {
  def ratio: Double = if (total == 0) 0.0 else blocked.toDouble / total
}

/** One executor's answer to a [[SampleRequest]]: its samples of the stage's tasks it runs. */
final case class StageSampleResult(requestId: Long, stageId: Int, executorId: String, tasks: Seq[TaskSample])

/** A task's backpressure ratio in a stage's result, with the executor it ran on. Immutable. */
final case class TaskBackPressure(executorId: String, sample: TaskSample) {
  def ratio: Double = sample.ratio
  def level: BackPressureLevel = BackPressureLevel.of(ratio)
}

/**
 * The backpressure of one stage (Flink's OperatorBackPressureStats): every sampled task's
 * ratio, and the stage's ratio, the highest of its tasks' (0 when no task was running to sample).
 * Immutable.
 */
final case class StageBackPressure(
    stageId: Int,
    requestId: Long,
    endTimestampMillis: Long,
    tasks: Seq[TaskBackPressure],
    executorsAsked: Int,
    executorsAnswered: Int) {
  def ratio: Double = if (tasks.isEmpty) 0.0 else tasks.map(_.ratio).max
  def level: BackPressureLevel = BackPressureLevel.of(ratio)
  def numSamples: Int = tasks.map(_.sample.total).sum
}
