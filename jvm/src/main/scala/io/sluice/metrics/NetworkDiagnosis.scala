package io.sluice.metrics

/**
 * The reasoning of "Flink Network Stack Vol. 2: Monitoring, Metrics, and that Backpressure Thing"
 * (Flink blog, 2019) turned into code (beyond Flink, which leaves it to the reader): the decision
 * tables that combine a stage's pool usages with its upstream stage's outPoolUsage into one
 * sentence about the likely cause of backpressure, and the buffer-timeout suggestion drawn from
 * the buffer fill rate of remote input. Pure functions.
 *
 * "High" means around 100 % (at least [[High]]); exclusiveBuffersUsage counts as high from
 * [[ExclusiveHigh]] (it grows with the share of backpressured channels). A producer counts as
 * backpressured when its outPoolUsage is high or, as modern Flink reads it, when it spends more
 * than half of its time waiting for output buffers (backPressuredTimeMsPerSecond): with a cap on
 * the buffers of one subpartition (spark.sluice.network.maxBuffersPerSubpartition) a producer
 * can be blocked on one slow channel while its pool is not full.
 */
object NetworkDiagnosis {
  val High = 0.9

  /** backPressuredTimeMsPerSecond above which a producer counts as backpressured. */
  val BackPressuredMsHigh = 500.0
  val ExclusiveHigh = 0.5

  /** A task's inPoolUsage is skewed when high while its siblings' median is at most this. */
  val SkewSiblingsMax = 0.5

  /** Buffers at least this full are "full": the buffer timeout rarely fires. */
  val FullBuffer = 0.8

  /** The largest buffer timeout Sluice suggests (latency grows by up to half of it per hop). */
  val MaxSuggestedTimeoutMs = 1000.0

  /** A stage's diagnosis. `suggestedBufferTimeoutMs`/`bufferFillRate` are None without remote input. */
  final case class Diagnosis(rootCause: String, bufferFillRate: Option[Double], suggestedBufferTimeoutMs: Option[Double])

  /**
   * @param tasks            the stage's tasks (latest attempt)
   * @param upstream         the tasks of the stages it reads from
   * @param bufferTimeoutMs  spark.sluice.bufferTimeout of the producers
   * @param segmentSize      spark.sluice.memory.segmentSize
   * @param sampledBlocked   the stage's latest stack sample found its tasks blocked on output
   *                         buffers more than half of the time (level HIGH); the metric
   *                         snapshots may be older or newer than that sample
   */
  def diagnose(tasks: Seq[TaskIOSnapshot], upstream: Seq[TaskIOSnapshot], bufferTimeoutMs: Long,
      segmentSize: Int, sampledBlocked: Boolean = false): Diagnosis = {
    val bytesRemote = tasks.map(_.numBytesInRemote).sum
    val buffersRemote = tasks.map(_.numBuffersInRemote).sum
    val fill = fillRate(bytesRemote, buffersRemote, segmentSize)
    val pipelinedInput = upstream.exists(_.outputType == "pipelined")
    Diagnosis(rootCause(tasks, upstream, sampledBlocked), fill,
      suggestBufferTimeout(bytesRemote, buffersRemote, segmentSize, bufferTimeoutMs, pipelinedInput))
  }

  /** Average bytes per remote buffer over the segment size (Flink Network Stack Vol. 2: numBytesInRemote / numBuffersInRemote). */
  def fillRate(bytesInRemote: Long, buffersInRemote: Long, segmentSize: Int): Option[Double] =
    if (buffersInRemote <= 0 || segmentSize <= 0) None
    else Some(math.min(1.0, bytesInRemote.toDouble / buffersInRemote / segmentSize))

  /**
   * A buffer timeout for throughput: buffers flushed at timeout T while `fill` full would take
   * about T / fill to fill up, so T x 0.8 / fill fills them to 80 % (capped at 1 s). Buffers that
   * already fill keep the current timeout; flushing every record (T = 0) gets 1 ms, which "A Deep-Dive into Flink's Network Stack"
   * shows keeps about 75 % of the maximum throughput. None for local-only input (buffering has
   * little effect there), blocking input (buffers are cut when full or at the end, the timeout is
   * unused) and T = -1 (flush only when full).
   */
  def suggestBufferTimeout(bytesInRemote: Long, buffersInRemote: Long, segmentSize: Int, bufferTimeoutMs: Long,
      pipelinedInput: Boolean): Option[Double] =
    fillRate(bytesInRemote, buffersInRemote, segmentSize) match {
      case None => None
      case Some(_) if !pipelinedInput || bufferTimeoutMs < 0 => None
      case Some(f) if f >= FullBuffer => Some(bufferTimeoutMs.toDouble)
      case Some(_) if bufferTimeoutMs == 0 => Some(1.0)
      case Some(f) => Some(math.min(MaxSuggestedTimeoutMs, math.ceil(bufferTimeoutMs * FullBuffer / math.max(f, 1e-3))))
    }

  private def pct(v: Double): String = f"${v * 100}%.0f%%"

  private def median(vs: Seq[Double]): Double = {
    val s = vs.sorted
    if (s.isEmpty) 0.0 else if (s.size % 2 == 1) s(s.size / 2) else (s(s.size / 2 - 1) + s(s.size / 2)) / 2
  }

  /** Whether a producer is backpressured: outPoolUsage high, or blocked more than half the time. */
  def isBackPressured(t: TaskIOSnapshot): Boolean =
    t.outPoolUsage >= High || t.backPressuredTimeMsPerSecond > BackPressuredMsHigh

  /** The root-cause sentence of the Vol. 2 article's tables for one stage and its upstream stage(s). */
  def rootCause(tasks: Seq[TaskIOSnapshot], upstream: Seq[TaskIOSnapshot], sampledBlocked: Boolean = false): String = {
    if (tasks.isEmpty) return "No Sluice network metrics for this stage yet."
    val consumers = tasks.filter(_.readsInput)
    val producersUp = upstream.filter(_.writesOutput)
    val anyUpOutHigh = producersUp.exists(isBackPressured)
    val metricsOutHigh = tasks.exists(t => t.writesOutput && isBackPressured(t))
    val ownOutHigh = metricsOutHigh || sampledBlocked
    val forwarding = if (ownOutHigh) " It is itself backpressured by its downstream (it waits for output buffers) and " +
    "forwards that backpressure upstream."
    else ""

    if (consumers.isEmpty) {
      return if (metricsOutHigh) "outPoolUsage is high: this stage is backpressured by its consumers or by the " +
      "network; look at the stage that reads its output."
      else if (sampledBlocked) "Its tasks were sampled waiting for output buffers: this stage is backpressured by " +
      "its consumers or by the network; look at the stage that reads its output."
      else "No backpressure indicated: outPoolUsage is low."
    }

    // One task far above its siblings: skew, not a uniformly slow stage.
    if (consumers.size >= 2) {
      val top = consumers.maxBy(_.inPoolUsage)
      val others = consumers.filterNot(_ eq top).map(_.inPoolUsage)
      if (top.inPoolUsage >= High && median(others) <= SkewSiblingsMax) {
        return s"Skew: ${top.key} has inPoolUsage ${pct(top.inPoolUsage)} while its siblings' median is " +
          s"${pct(median(others))}: backpressure comes from this one task, through data skew (heavy keys: " +
          "split or pre-aggregate them) or a resource skew on its executor." + forwarding
      }
    }

    val floatingHigh = consumers.exists(_.floatingBuffersUsage >= High)
    val inHigh = consumers.exists(_.inPoolUsage >= High)
    val exclusiveHigh = consumers.exists(_.exclusiveBuffersUsage >= ExclusiveHigh)
    val allLocal = consumers.forall(_.numBytesInRemote == 0)

    if (floatingHigh || inHigh) {
      val channels = if (exclusiveHigh) "most or all of its input channels" else "only some of its input channels"
      if (anyUpOutHigh) {
        s"Backpressure on $channels: inPoolUsage is high and the upstream stage's outPoolUsage is high, so this " +
        "stage cannot keep up with its input (a slow receiver) and is the likely source of backpressure." + forwarding
      } else {
        s"inPoolUsage is high but every upstream outPoolUsage is low: backpressure may eventually appear on " +
        s"$channels." + forwarding
      }
    } else if (anyUpOutHigh) {
      if (allLocal) {
        "The upstream stage's outPoolUsage is high while this stage reads through local channels only (they " +
        "have no input buffers, so inPoolUsage stays 0): this stage reads slower than its producers write " +
        "(a slow receiver)." + forwarding
      } else {
        "Every task of this stage has a low inPoolUsage while the upstream stage's outPoolUsage is high: a " +
        "potential network bottleneck (the network is shared by every task of an executor), or a credit round " +
        "trip too long for spark.sluice.network.buffersPerChannel."
      }
    } else if (ownOutHigh) {
      "outPoolUsage is high but inPoolUsage is low: backpressured by its downstream or the network, a " +
      "temporary situation (its upstream is not backpressured, yet or any more)."
    } else {
      "No backpressure indicated: pool usages are low."
    }
  }
}
