package org.apache.spark.shuffle.sluice.bench

import java.util.concurrent.locks.LockSupport

import org.apache.spark.sql.{DataFrame, Encoders, SparkSession, functions}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReader, PartitionReaderFactory}
import org.apache.spark.sql.connector.read.streaming.{PartitionOffset, SupportsRealTimeRead}
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead.RecordStatus
import org.apache.spark.sql.execution.streaming.runtime.ContinuousRecordPartitionOffset
import org.apache.spark.sql.execution.streaming.sources.{LowLatencyMemoryStream, LowLatencyMemoryStreamInputPartition}
import org.apache.spark.util.SystemClock

/**
 * The source of `sluice bench latency`: a LowLatencyMemoryStream (so Real-Time Mode plans,
 * checkpoints and merges its offsets as usual) whose readers do not fetch records from the
 * driver one RPC at a time but generate them on the executor, on a fixed schedule: record `i` of
 * a partition is due at a time computed from the schedule, and is handed out then (never before),
 * stamped `created_us` with that due time. Falling behind therefore shows as latency, as with a
 * real open-loop source. Records are `(created_us, phase, key)`; key `k` always comes from
 * partition `k % numPartitions`, so each key's records keep their order through the shuffle.
 */
final class ScheduledRateStream(spark: SparkSession, numPartitions: Int, schedule: RateSchedule)
  extends LowLatencyMemoryStream[(Long, Int, Int)](ScheduledRateStream.nextId(), spark, numPartitions,
    new SystemClock)(Encoders.product[(Long, Int, Int)]) {

  /** The stream as a DataFrame with columns `created_us`, `phase`, `key`. */
  def toScheduledDF(): DataFrame = toDF().toDF("created_us", "phase", "key")

  override def createReaderFactory(): PartitionReaderFactory = new ScheduledReaderFactory(numPartitions, schedule)
}

object ScheduledRateStream {
  private val ids = new java.util.concurrent.atomic.AtomicInteger(1 << 20)
  private def nextId(): Int = ids.incrementAndGet()

  /**
   * A stream that starts its schedule `startDelayMs` from now. `phases`, `rates` (records a
   * second, all partitions together) and `durationsMs` describe the steps, in order.
   */
  def create(spark: SparkSession, numPartitions: Int, numKeys: Int, startDelayMs: Long, phases: Array[Int],
      rates: Array[Long], durationsMs: Array[Long]): ScheduledRateStream = {
    val start = LatencyProbeWriter.nowMicros() + startDelayMs * 1000L
    new ScheduledRateStream(spark, numPartitions, RateSchedule(start, numPartitions, numKeys, phases, rates, durationsMs))
  }

  /** Registers `sluice_bench_now_us()`: the wall clock in microseconds, evaluated per row where it runs. */
  def registerNowUdf(spark: SparkSession): Unit =
    spark.udf.register("sluice_bench_now_us", functions.udf(() => LatencyProbeWriter.nowMicros()).asNondeterministic())
}

/** When each record of each partition is due, and what it holds. Immutable. */
final case class RateSchedule(startMicros: Long, numPartitions: Int, numKeys: Int, phases: Array[Int],
    rates: Array[Long], durationsMs: Array[Long]) {

  /** Records of one partition in each step, and where each step starts (record index, time). */
  private val perPartition: Array[Long] = rates.indices.map(i => rates(i) * durationsMs(i) / 1000L / numPartitions).toArray
  private val firstIndex: Array[Long] = perPartition.scanLeft(0L)(_ + _)
  private val stepStartMicros: Array[Long] = durationsMs.map(_ * 1000L).scanLeft(startMicros)(_ + _)

  def size: Long = firstIndex.last

  /** (due time in µs, phase) of record `i` of a partition; None past the schedule's end. */
  def due(i: Long): Option[(Long, Int)] = {
    val step = stepOf(i)
    if (step == perPartition.length) None
    else {
      val perSecond = rates(step).toDouble / numPartitions
      val offset = ((i - firstIndex(step)) * 1e6 / perSecond).toLong
      Some((stepStartMicros(step) + offset, phases(step)))
    }
  }

  /** The time between record `i` of a partition and its next one in the same step, in µs. */
  def periodMicros(i: Long): Long = (1e6 * numPartitions / rates(math.min(stepOf(i), rates.length - 1))).toLong

  /** The step record `i` of a partition belongs to; the number of steps past the schedule's end. */
  private def stepOf(i: Long): Int = {
    var step = 0
    while (step < perPartition.length && i >= firstIndex(step + 1)) step += 1
    step
  }

  def key(partition: Int, i: Long): Int = {
    val perPartitionKeys = math.max(1, numKeys / numPartitions)
    partition + numPartitions * (i % perPartitionKeys).toInt
  }
}

private final class ScheduledReaderFactory(numPartitions: Int, schedule: RateSchedule) extends PartitionReaderFactory {
  override def createReader(partition: InputPartition): PartitionReader[InternalRow] = {
    val p = partition.asInstanceOf[LowLatencyMemoryStreamInputPartition]
    new ScheduledReader(p.partition, p.startOffset, schedule)
  }
}

/** Hands out the partition's records when they are due. Used by one task thread. */
private final class ScheduledReader(partition: Int, startOffset: Int, schedule: RateSchedule)
  extends SupportsRealTimeRead[InternalRow] {

  private var offset = startOffset
  private val writer = new UnsafeRowWriter(3)
  private var current: InternalRow = _

  override def nextWithTimeout(timeoutMs: java.lang.Long): RecordStatus = schedule.due(offset) match {
    case None =>
      Thread.sleep(math.max(1L, timeoutMs.longValue()))
      RecordStatus.newStatusWithoutArrivalTime(false)
    case Some((dueMicros, phase)) =>
      val wait = dueMicros - LatencyProbeWriter.nowMicros()
      if (wait > timeoutMs.longValue() * 1000L) {
        Thread.sleep(math.max(1L, timeoutMs.longValue()))
        RecordStatus.newStatusWithoutArrivalTime(false)
      } else {
        if (wait > 0) LockSupport.parkNanos(wait * 1000L)
        writer.reset()
        writer.zeroOutNullBytes()
        writer.write(0, dueMicros)
        writer.write(1, phase)
        writer.write(2, schedule.key(partition, offset))
        current = writer.getRow.copy()
        offset += 1
        RecordStatus.newStatusWithArrivalTimeMs(dueMicros / 1000L)
      }
  }

  override def next(): Boolean = nextWithTimeout(java.lang.Long.valueOf(Long.MaxValue / 1000000L)).hasRecord

  override def get(): InternalRow = current

  override def getOffset: PartitionOffset = ContinuousRecordPartitionOffset(partition, offset)

  override def close(): Unit = ()
}
