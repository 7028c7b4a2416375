package org.apache.spark.shuffle.sluice.bench

import java.util.concurrent.locks.LockSupport

import org.apache.spark.sql.{DataFrame, Encoders, SparkSession}
import org.apache.spark.sql.execution.streaming.sources.LowLatencyMemoryStream
import org.apache.spark.util.SystemClock

/**
 * The second source of `sluice bench latency`, as a new user would feed Real-Time Mode: Spark's
 * own LowLatencyMemoryStream, filled on the driver. A feeder thread adds each record of the
 * schedule to its partition when it is due, stamped `created_us` with that due time; the
 * stream's readers fetch records from the driver one RPC at a time and sleep when there is none,
 * so records reach the map side in small bursts, unlike [[ScheduledRateStream]]'s evenly spaced
 * ones. The records of the partitions are interleaved: at `r` records a second, one every `1/r`
 * seconds, partition after partition. Columns and keys are those of [[ScheduledRateStream]].
 */
final class DriverFedStream(spark: SparkSession, numPartitions: Int, newSchedule: () => RateSchedule) {

  private val stream = new LowLatencyMemoryStream[(Long, Int, Int)](DriverFedStream.nextId(), spark, numPartitions,
    new SystemClock)(Encoders.product[(Long, Int, Int)])

  @volatile private var stopped = false

  private val feeder = new Thread(() => feed(newSchedule()), "sluice-bench-driver-feeder")
  feeder.setDaemon(true)

  /** The stream as a DataFrame with columns `created_us`, `phase`, `key`. */
  def toScheduledDF(): DataFrame = stream.toDF().toDF("created_us", "phase", "key")

  /**
   * Starts adding records, on a schedule that starts now plus the start delay. The caller starts
   * it once the query's tasks run: records added before then would be fetched as a backlog, one
   * RPC at a time, and arrive late in whichever phase they fall.
   */
  def start(): Unit = feeder.start()

  /** Stops the feeder and waits for it (at most 10 s). */
  def stop(): Unit = {
    stopped = true
    feeder.interrupt()
    feeder.join(10000L)
  }

  private def feed(schedule: RateSchedule): Unit = {
    var index = 0L
    var partition = 0
    try {
      while (!stopped) {
        schedule.due(index) match {
          case None => return
          case Some((dueMicros, phase)) =>
            // Partition p's record of this index is due p/numPartitions of a period later.
            val at = dueMicros + partition * schedule.periodMicros(index) / numPartitions
            val wait = at - LatencyProbeWriter.nowMicros()
            if (wait > 0) LockSupport.parkNanos(wait * 1000L)
            if (!stopped) stream.addData(partition, List((at, phase, schedule.key(partition, index))))
            partition += 1
            if (partition == numPartitions) {
              partition = 0
              index += 1
            }
        }
      }
    } catch {
      case _: InterruptedException => ()
    }
  }
}

object DriverFedStream {
  private val ids = new java.util.concurrent.atomic.AtomicInteger(1 << 21)
  private def nextId(): Int = ids.incrementAndGet()

  /**
   * A driver-fed stream whose schedule starts `startDelayMs` after [[DriverFedStream.start]];
   * arguments as [[ScheduledRateStream.create]].
   */
  def create(spark: SparkSession, numPartitions: Int, numKeys: Int, startDelayMs: Long, phases: Array[Int],
      rates: Array[Long], durationsMs: Array[Long]): DriverFedStream =
    new DriverFedStream(spark, numPartitions,
      () => {
        val start = LatencyProbeWriter.nowMicros() + startDelayMs * 1000L
        RateSchedule(start, numPartitions, numKeys, phases, rates, durationsMs)
      })
}
