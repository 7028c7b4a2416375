package io.sluice.metrics

import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.atomic.LongAdder

import io.sluice.memory.{BufferRequestWaits, LocalBufferPool}
import io.sluice.partition.{PipelinedResultPartition, ResultPartition}
import io.sluice.partition.consumer.SingleInputGate

/**
 * The network metrics of one task attempt (Flink's TaskIOMetricGroup with the shuffle metrics
 * NettyShuffleMetricFactory registers per task): the task's writer attaches its result
 * partition, its readers attach their input gates and count the records they hand on, and the
 * group reads everything else from those components. [[sample]] turns it into an immutable
 * [[TaskIOSnapshot]] and advances the ...PerSecond meters.
 *
 * Pool usages follow Flink's gauges: used buffers over pool size summed over the task's
 * partitions (outPoolUsage) or gates (floating: the gate pools; exclusive: what the gates' remote
 * channels report); inPoolUsage = (used floating + used exclusive) / (floating + exclusive).
 *
 * Thread-safety: attaching and counting happen on the task thread; [[sample]] and [[finish]] on
 * the metrics thread, serialised by this group's lock.
 */
final class TaskIOMetricGroup(
    val key: TaskKey,
    clock: Clock,
    rateWindow: Int = TaskIOMetricGroup.DefaultRateWindow) {

  private val partitions = new CopyOnWriteArrayList[ResultPartition]()
  private val gates = new CopyOnWriteArrayList[SingleInputGate]()
  private val startNanos = clock.nanoTime()
  val startedAtMillis: Long = clock.currentTimeMillis()

  /** Records the task's readers handed on (Flink's numRecordsIn); latency markers do not count. */
  val numRecordsIn = new SimpleCounter

  @volatile private var latencyStats: LatencyStats = _

  /** Nanoseconds the task's thread waited for network buffers, once [[bindBufferWaits]] ran on it. */
  private val bufferWaitNanos = new LongAdder

  /** Counts the calling thread's waits for network buffers as this task's (call on the task thread). */
  def bindBufferWaits(): Unit = BufferRequestWaits.bind(bufferWaitNanos)

  /** Stops counting the calling thread's waits as this task's (call on the task thread as it ends). */
  def unbindBufferWaits(): Unit = BufferRequestWaits.unbind(bufferWaitNanos)

  // Meters, advanced by sample() under this group's lock.
  private val meters = Array.fill(MetricNames.Counters.size)(new RateMeter(rateWindow, startNanos))
  private val backPressuredMeter = new RateMeter(rateWindow, startNanos)
  private val idleMeter = new RateMeter(rateWindow, startNanos)
  private var last: TaskIOSnapshot = _
  @volatile private var finalSnapshot: TaskIOSnapshot = _

  def attachPartition(partition: ResultPartition): Unit = partitions.addIfAbsent(partition)

  def attachInputGate(gate: SingleInputGate): Unit = gates.addIfAbsent(gate)

  /**
   * Switches latency tracking on for this task (idempotent): markers it reads from now on go into
   * histograms at `granularity`. Before this, the task has no histograms at all.
   */
  def enableLatencyTracking(granularity: LatencyGranularity, historySize: Int,
      executorHistogram: Option[LatencyHistogram]): LatencyStats = synchronized {
    if (latencyStats == null) latencyStats = new LatencyStats(granularity, historySize, clock, executorHistogram)
    latencyStats
  }

  /** The task's latency histograms, or None when tracking is off. */
  def latency: Option[LatencyStats] = Option(latencyStats)

  def isFinished: Boolean = finalSnapshot != null

  // ---- reading the attached components ------------------------------------------------------

  private def sumPartitions(f: ResultPartition => Long): Long = {
    var s = 0L
    partitions.forEach(p => s += f(p))
    s
  }

  private def sumGates(f: SingleInputGate => Long): Long = {
    var s = 0L
    gates.forEach(g => s += f(g))
    s
  }

  /** The counters now (final ones once finished), in [[MetricNames.Counters]] order. */
  def currentCounters: Array[Long] = {
    val f = finalSnapshot
    if (f != null) ShuffleMetricRegistry.countersOf(f) else counters
  }

  private def counters: Array[Long] = Array(
    sumPartitions(_.numRecordsOut.sum()),
    numRecordsIn.count,
    sumPartitions(_.numBytesOut.sum()),
    sumGates(_.numBytesIn.sum()),
    sumGates(_.numBytesInLocal.sum()),
    sumGates(_.numBytesInRemote.sum()),
    sumPartitions(_.numBuffersOut.sum()),
    sumGates(_.numBuffersInLocal.sum()),
    sumGates(_.numBuffersInRemote.sum()),
    gates.size.toLong,
    sumGates(_.numChannelsRequested.toLong),
    sumGates(_.numPartitionRequests),
    sumGates(_.numControlMessages))

  private def ratio(used: Long, total: Long): Double =
    if (total <= 0) 0.0 else math.min(1.0, math.max(0.0, used.toDouble / total))

  private def poolUsed(p: LocalBufferPool): Long = if (p.isDestroyed) 0L else p.numUsedBuffers.toLong
  private def poolSize(p: LocalBufferPool): Long = if (p.isDestroyed) 0L else p.numBuffers.toLong

  // ---- snapshots -------------------------------------------------------------------------------

  /**
   * Samples the task now: counters, rates over the meter window, pool usages and queue lengths.
   * After [[finish]], returns the final snapshot.
   */
  def sample(): TaskIOSnapshot = synchronized {
    if (finalSnapshot != null) finalSnapshot
    else {
      last = measure(running = true)
      last
    }
  }

  /**
   * Ends the group (the task attempt is over): the counters and rates are read one last time;
   * pool usages and queue lengths keep the values of the last sample taken while it ran.
   * Idempotent; returns the final snapshot.
   */
  def finish(): TaskIOSnapshot = synchronized {
    if (finalSnapshot == null) {
      val now = measure(running = false)
      val prev = last
      finalSnapshot = if (prev == null) now
      else now.copy(outPoolUsage = prev.outPoolUsage,
        inPoolUsage = prev.inPoolUsage, floatingBuffersUsage = prev.floatingBuffersUsage,
        exclusiveBuffersUsage = prev.exclusiveBuffersUsage, outputQueueLength = prev.outputQueueLength,
        inputQueueLength = prev.inputQueueLength)
      partitions.clear()
      gates.clear()
    }
    finalSnapshot
  }

  private def measure(running: Boolean): TaskIOSnapshot = {
    val nowNanos = clock.nanoTime()
    val c = counters
    val rates = Array.tabulate(c.length)(i => meters(i).update(nowNanos, c(i)))
    // Modern Flink: busy = 1000 - idle - backPressured (ms per second); waits still going on count.
    val backPressured = clampMs(backPressuredMeter.update(nowNanos, sumPartitions(_.backPressuredTimeNanosNow) / 1000000L))
    val idle = clampMs(idleMeter.update(nowNanos, sumGates(_.idleTimeNanosNow) / 1000000L))
    val busy = clampMs(1000.0 - idle - backPressured)
    val inputWaits = scala.collection.mutable.Map.empty[String, Long]
    gates.forEach(_.metrics.inputWaitNanosByProducer.foreach { case (e, n) =>
      inputWaits(e) = inputWaits.getOrElse(e, 0L) + n / 1000000L
    })

    var outUsed, outTotal, floatUsed, floatTotal, exclUsed, exclTotal, outQueue, inQueue = 0L
    partitions.forEach { p =>
      outUsed += poolUsed(p.bufferPool); outTotal += poolSize(p.bufferPool)
      if (!p.isReleased) outQueue += p.numQueuedBuffers
    }
    gates.forEach { g =>
      floatUsed += math.max(0L, poolUsed(g.floatingBuffers) - g.numFloatingBuffersAvailable)
      floatTotal += poolSize(g.floatingBuffers)
      exclUsed += g.numExclusiveBuffersUsed
      exclTotal += g.numExclusiveBuffers
      inQueue += g.inputQueueLength
    }
    val (outputType, bufferTimeout) = {
      val it = partitions.iterator()
      if (it.hasNext) it.next() match {
        case p: PipelinedResultPartition => (p.partitionType.name, Some(p.bufferTimeoutMs))
        case p => (p.partitionType.name, None)
      }
      else if (last != null) (last.outputType, last.bufferTimeoutMs)
      else ("", None)
    }
    TaskIOSnapshot(key, running, startedAtMillis, clock.currentTimeMillis(), outputType,
      outPoolUsage = ratio(outUsed, outTotal),
      inPoolUsage = ratio(floatUsed + exclUsed, floatTotal + exclTotal),
      floatingBuffersUsage = ratio(floatUsed, floatTotal),
      exclusiveBuffersUsage = ratio(exclUsed, exclTotal),
      numRecordsOut = c(0), numRecordsIn = c(1), numBytesOut = c(2), numBytesIn = c(3), numBytesInLocal = c(4),
      numBytesInRemote = c(5), numBuffersOut = c(6), numBuffersInLocal = c(7), numBuffersInRemote = c(8),
      numRecordsOutPerSecond = rates(0), numRecordsInPerSecond = rates(1), numBytesOutPerSecond = rates(2),
      numBytesInPerSecond = rates(3), numBytesInLocalPerSecond = rates(4), numBytesInRemotePerSecond = rates(5),
      numBuffersOutPerSecond = rates(6), numBuffersInLocalPerSecond = rates(7), numBuffersInRemotePerSecond = rates(8),
      outputQueueLength = outQueue.toInt, inputQueueLength = inQueue.toInt,
      backPressuredTimeMsPerSecond = backPressured, busyTimeMsPerSecond = busy, idleTimeMsPerSecond = idle,
      latency = Option(latencyStats).map(_.snapshot).getOrElse(Nil),
      latencyTotal = Option(latencyStats).flatMap(_.total),
      bufferTimeoutMs = bufferTimeout,
      numInputGates = c(9), numInputChannels = c(10), numPartitionRequests = c(11), numControlMessages = c(12),
      numInputGatesPerSecond = rates(9), numInputChannelsPerSecond = rates(10), numPartitionRequestsPerSecond = rates(11),
      numControlMessagesPerSecond = rates(12),
      bufferWaitMs = bufferWaitNanos.sum() / 1000000L,
      inputWaitByProducerMs = inputWaits.toMap)
  }

  private def clampMs(v: Double): Double = math.min(1000.0, math.max(0.0, v))

  override def toString: String = s"TaskIOMetricGroup($key)"
}

object TaskIOMetricGroup {

  /** Ticks a ...PerSecond rate averages over (5 ticks of the default 1 s report interval). */
  val DefaultRateWindow = 5
}
