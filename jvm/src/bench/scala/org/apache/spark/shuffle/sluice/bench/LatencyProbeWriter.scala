package org.apache.spark.shuffle.sluice.bench

import java.io.File
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, StandardCopyOption}
import java.time.Instant

import scala.collection.mutable

import org.apache.spark.sql.{Dataset, ForeachWriter, Row}
import org.apache.spark.sql.streaming.{OutputMode, StreamingQuery, Trigger}

/**
 * The sink of `sluice bench latency`: a ForeachWriter that measures, for every output row of the
 * benchmark's aggregation, how long ago its newest input record was created (`created_us`, its
 * due time on the source's schedule) and how long ago it was stamped on the map side, right
 * before the shuffle (`map_us`, from `sluice_bench_now_us()`, [[ScheduledRateStream.registerNowUdf]]).
 * Latencies go into one [[LatencyHistogram]] per series (`e2e` or `shuffle`) and phase (the
 * source's rate step, column `phase`), which the task writes as JSON into `dir` about once a
 * second and when it closes; the Python side merges the files. One instance per task; a task's
 * calls come from its own thread.
 */
final class LatencyProbeWriter(dir: String) extends ForeachWriter[Row] {

  @transient private var histograms: mutable.Map[String, LatencyHistogram] = _
  @transient private var file: File = _
  @transient private var lastWrite = 0L
  @transient private var rows = 0L

  override def open(partitionId: Long, epochId: Long): Boolean = {
    histograms = mutable.LinkedHashMap.empty
    file = new File(dir, s"latency-p$partitionId-e$epochId-${System.nanoTime()}.json")
    lastWrite = System.nanoTime()
    rows = 0
    true
  }

  override def process(row: Row): Unit = {
    val now = LatencyProbeWriter.nowMicros()
    val phase = row.getAs[Int]("phase")
    record(s"e2e/$phase", now - row.getAs[Long]("created_us"))
    record(s"shuffle/$phase", now - row.getAs[Long]("map_us"))
    rows += 1
    if ((rows & 255) == 0 && System.nanoTime() - lastWrite > 1000000000L) write()
  }

  override def close(errorOrNull: Throwable): Unit = if (histograms != null) write()

  private def record(series: String, micros: Long): Unit =
    histograms.getOrElseUpdate(series, new LatencyHistogram).record(micros)

  /** Replaces the task's file atomically, so a reader never sees half of it. */
  private def write(): Unit = {
    lastWrite = System.nanoTime()
    val body = histograms.map { case (series, h) =>
      val buckets = h.buckets.map { case (lo, hi, n) => s"[$lo,$hi,$n]" }.mkString(",")
      s""""$series":[$buckets]"""
    }.mkString("{\"rows\":" + rows + ",\"histograms\":{", ",", "}}")
    val tmp = new File(file.getPath + ".tmp")
    Files.write(tmp.toPath, body.getBytes(StandardCharsets.UTF_8))
    Files.move(tmp.toPath, file.toPath, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE)
  }
}

object LatencyProbeWriter {

  /** Wall-clock microseconds since the epoch: the same clock in every JVM of the machine. */
  def nowMicros(): Long = {
    val i = Instant.now()
    i.getEpochSecond * 1000000L + i.getNano / 1000
  }

  /**
   * Starts `df` (columns `phase`, `created_us`, `map_us`, ...) as a Real-Time Mode query in update
   * mode into a [[LatencyProbeWriter]] writing to `dir`; called from Python through py4j.
   */
  def start(df: Dataset[Row], dir: String, checkpointLocation: String, batchDuration: String): StreamingQuery = {
    new File(dir).mkdirs()
    df.writeStream
      .foreach(new LatencyProbeWriter(dir))
      .outputMode(OutputMode.Update())
      .option("checkpointLocation", checkpointLocation)
      .trigger(Trigger.RealTime(batchDuration))
      .start()
  }
}
