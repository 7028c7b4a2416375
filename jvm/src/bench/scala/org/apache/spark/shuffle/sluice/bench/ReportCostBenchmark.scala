package org.apache.spark.shuffle.sluice.bench

import java.util.Locale

import io.sluice.metrics._
import org.apache.spark.shuffle.sluice.rpc.{ReportCodec, RpcPayload, SluiceMessages}

/**
 * What an executor's periodic report costs, in bytes and in time on each side, Java-serialised
 * ([[RpcPayload]]) against [[ReportCodec]]: reports of an executor running 1, 8 and 32 tasks (each
 * task a full snapshot with four producers' input waits), the executor's totals and rates under
 * every counter's name, its transport and its dirs. A driver decodes one such report per executor
 * every spark.sluice.metrics.reportInterval (1 s by default). Prints one JSON line of kind `run`
 * per task count: bytes, and the median microseconds per encode and decode over seven batches after
 * a warm-up. Run by `sluice bench scale --simulated` (its `reports` part); `--quick` times a few
 * calls only (tests).
 */
object ReportCostBenchmark {

  private val TaskCounts = Seq(1, 8, 32)
  private val Batches = 7
  private var warmUp = 20000
  private var perBatch = 2000

  def main(args: Array[String]): Unit = {
    if (args.contains("--quick")) { warmUp = 10; perBatch = 10 }
    TaskCounts.foreach(n => println(run(n)))
  }

  private def run(tasks: Int): String = {
    val report = reportOf(tasks)
    val javaBytes = RpcPayload.encode(report)
    val codecBytes = ReportCodec.encode(report)
    require(RpcPayload.decode(javaBytes) == report && ReportCodec.decode(codecBytes) == report, "a report round-trips")
    val fields = Seq(
      "kind" -> "\"run\"", "tasks" -> tasks.toString,
      "java_bytes" -> javaBytes.length.toString, "codec_bytes" -> codecBytes.length.toString,
      "java_encode_us" -> num(micros(RpcPayload.encode(report))),
      "codec_encode_us" -> num(micros(ReportCodec.encode(report))),
      "java_decode_us" -> num(micros(RpcPayload.decode(javaBytes))),
      "codec_decode_us" -> num(micros(ReportCodec.decode(codecBytes))))
    fields.map { case (k, v) => "\"" + k + "\":" + v }.mkString("{", ",", "}")
  }

  /** The median over [[Batches]] batches of the microseconds one call of `f` took, after a warm-up. */
  private def micros(f: => AnyRef): Double = {
    var sink = 0
    var i = 0
    while (i < warmUp) { sink += System.identityHashCode(f) & 1; i += 1 }
    val perCall = (0 until Batches).map { _ =>
      val start = System.nanoTime()
      var j = 0
      while (j < perBatch) { sink += System.identityHashCode(f) & 1; j += 1 }
      (System.nanoTime() - start) / 1000.0 / perBatch
    }.sorted
    if (sink == Int.MinValue) println(sink) // keeps the calls
    perCall(Batches / 2)
  }

  private def reportOf(tasks: Int): SluiceMessages.Report = {
    val now = 1764480000000L
    val snapshots = (0 until tasks).map { i =>
      TaskIOSnapshot(TaskKey(3, 0, i, 1000L + i), running = i % 2 == 0, now - 5000L - i, now, "blocking",
        0.25, 0.5, 0.125, 0.75, 120000L + i, 118000L + i, 12000000L + i, 11800000L + i, 5000000L + i, 6800000L + i,
        370L + i, 160L + i, 210L + i, 24000.5, 23600.25, 2400000.5, 2360000.75, 1000000.5, 1360000.25, 74.5, 32.25,
        42.5, 2, 3, 12.5, 640.25, 347.25, Nil, None, None, 1L, 4L + i, 2L, 9L + i, 0.2, 0.8, 0.4, 1.8, 15L + i,
        Map("1" -> (10L + i), "2" -> (20L + i), "3" -> (30L + i), "4" -> (40L + i)))
    }
    val totals = MetricNames.Counters.zipWithIndex.map { case (n, i) => n -> (1000000L * (i + 1)) }.toMap
    val rates = MetricNames.Counters.zipWithIndex.map { case (n, i) => (n + MetricNames.PerSecond) -> (1000.5 * i) }.toMap
    val snapshot = ExecutorSnapshot("17", now, SegmentsSnapshot(32768, 2048, 1500, 548), snapshots, totals, rates,
      TransportSnapshot(38211, 12, 11, ServerReadSnapshot(2, 0, 15L, 128, 12, 24), 11L))
    SluiceMessages.Report(snapshot, Nil, Some(SluiceMessages.SluiceServer("17", "10.0.3.17", 38211)), None,
      Seq("/data1/yarn/local/usercache/u/appcache/application_1764480000000_0042/sluice-17-a",
        "/data2/yarn/local/usercache/u/appcache/application_1764480000000_0042/sluice-17-b"))
  }

  private def num(d: Double): String = String.format(Locale.ROOT, "%.3f", Double.box(d))
}
