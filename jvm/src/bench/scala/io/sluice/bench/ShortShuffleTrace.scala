package io.sluice.bench

import java.nio.file.Files
import java.util.Locale

import scala.collection.mutable

import io.sluice.{ShuffleEnvironment, TransportSettings}
import io.sluice.config.SluiceConf
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.{GateInput, ProducerLocation}
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.unsafe.Platform

/**
 * Sluice's own fixed costs of one tiny blocking shuffle, phase by phase (a benchmark, never a
 * test; docs/benchmarks.md, "Short queries"): two executors' [[ShuffleEnvironment]]s in one JVM
 * (A and B, over loopback), each shuffle `--maps` map outputs (half written in each executor) of
 * `--records` small records into `--subpartitions` subpartitions, then one reducer per
 * subpartition (alternating executors) reading it from every map output: half local, half remote.
 *
 * Timed on the calling thread with System.nanoTime, per map output: `partition` (the partition,
 * its pool and file are created), `write` (the records), `finish` (the last spill, the file and
 * its index, registration); per reducer: `gate` (the gate's set-up), `first` (from the first
 * getNext, which requests the channels, to the first buffer), `rest` (to the end of every input)
 * and `close`. The first shuffle is reported alone (`cold`: the JVM's first use of these classes),
 * then the median and the 90th percentile of each phase over the `--shuffles` after `--warmups`
 * unrecorded ones. Prints JSON lines; also the connections each executor opened (one per peer,
 * reused across shuffles, is the design).
 *
 * {{{
 *   gradle shortShuffleTrace -Pbench.args='--shuffles 300 --warmups 200'
 * }}}
 */
object ShortShuffleTrace {

  /** Shuffles whose total is printed one by one: how Sluice's fixed costs fall as the JVM warms up. */
  private val WarmUpCurve = 30

  def main(args: Array[String]): Unit = {
    val opts = BenchOptions.parse(args)
    val shuffles = opts.getOrElse("shuffles", "300").toInt
    val warmups = opts.getOrElse("warmups", "200").toInt
    val maps = opts.getOrElse("maps", "4").toInt
    val subpartitions = opts.getOrElse("subpartitions", "8").toInt
    val records = opts.getOrElse("records", "250").toInt
    val sluice = SluiceConf(opts.collect { case (k, v) if k.startsWith("spark.sluice.") => k -> v }.toSeq)
    val trace = new ShortShuffleTrace(sluice, maps, subpartitions, records)
    try {
      println(s"""{"kind":"cold","phase":"environment","n":2,"median_us":${trace.startNanos.max / 1000}}""")
      report("cold", trace.shuffle(1).map { case (k, v) => k -> Seq(v.head) })
      (1 to warmups).foreach { i =>
        val phases = trace.shuffle(1 + i)
        if (i < WarmUpCurve) {
          println(s"""{"kind":"shuffle","number":${1 + i},"total_us":${phases.values.flatten.sum / 1000}}""")
        }
      }
      val all = mutable.LinkedHashMap.empty[String, mutable.ArrayBuffer[Long]]
      (1 to shuffles).foreach { i =>
        trace.shuffle(1 + warmups + i).foreach { case (k, v) => all.getOrElseUpdate(k, mutable.ArrayBuffer.empty) ++= v }
      }
      report("warm", all.map { case (k, v) => k -> v.toSeq })
      println(s"""{"kind":"connections","A":${trace.connectionsOpened("A")},"B":${trace.connectionsOpened("B")},""" +
        s""""shuffles":${1 + warmups + shuffles}}""")
    } finally trace.close()
  }

  private def report(kind: String, phases: collection.Map[String, Seq[Long]]): Unit = phases.foreach {
    case (phase, nanos) =>
      val sorted = nanos.sorted
      def us(q: Double): String =
        String.format(Locale.ROOT, "%.1f", Double.box(sorted(math.min(sorted.size - 1, (q * sorted.size).toInt)) / 1e3))
      println(s"""{"kind":"$kind","phase":"$phase","n":${sorted.size},"median_us":${us(0.5)},"p90_us":${us(0.9)}}""")
  }
}

/** Two executors living for the whole trace. */
final class ShortShuffleTrace(conf: SluiceConf, maps: Int, subpartitions: Int, records: Int) {

  private val dir = Files.createTempDirectory("sluice-short-trace").toFile
  private val started = Seq("A", "B").map { id =>
    val d = new java.io.File(dir, id); d.mkdirs()
    val start = System.nanoTime()
    val env = new ShuffleEnvironment(conf, id, Seq(d), None, TransportSettings.plain(SparkInternals.TransportPipeline))
    (id, env, System.nanoTime() - start)
  }
  private val envs = started.map { case (id, env, _) => id -> env }.toMap

  /** How long each executor's environment took to start (the first one loads the classes). */
  val startNanos: Seq[Long] = started.map(_._3)
  private val record = new Array[Byte](16)

  def connectionsOpened(id: String): Long = envs(id).connectionManager.counters.connectionsOpened.sum()

  /** One shuffle; the nanoseconds of each phase (one value per map output or reducer). */
  def shuffle(shuffleId: Int): collection.Map[String, Seq[Long]] = {
    val t = mutable.LinkedHashMap.empty[String, mutable.ArrayBuffer[Long]]
    def time[T](phase: String)(f: => T): T = {
      val start = System.nanoTime()
      val r = f
      t.getOrElseUpdate(phase, mutable.ArrayBuffer.empty) += System.nanoTime() - start
      r
    }
    val producers = (0 until maps).map { m =>
      val env = envs(if (m % 2 == 0) "A" else "B")
      val id = ResultPartitionID(shuffleId, m.toLong)
      val p = time("map.partition")(env.createBlockingPartition(id, subpartitions))
      time("map.write") {
        var i = 0
        while (i < records) {
          p.emitRecord(i % subpartitions, record, Platform.BYTE_ARRAY_OFFSET.toLong, record.length)
          i += 1
        }
      }
      time("map.finish") { p.finish(); env.registerPartition(p) }
      (id, ProducerLocation(env.executorId, "127.0.0.1", env.serverPort))
    }
    (0 until subpartitions).foreach { s =>
      val env = envs(if (s % 2 == 0) "A" else "B")
      val inputs = producers.map { case (id, at) => GateInput(id, s, s + 1, at) }
      val gate = time("reduce.gate")(env.createInputGate(s"trace reducer $s", inputs, waitForProducers = false))
      try {
        var next = time("reduce.first")(gate.getNext())
        time("reduce.rest") {
          while (next != null) {
            next.buffer.release()
            next = gate.getNext()
          }
        }
      } finally time("reduce.close")(gate.close())
    }
    envs.values.foreach(_.releaseShuffle(shuffleId))
    t.map { case (k, v) => k -> v.toSeq }
  }

  def close(): Unit = {
    envs.values.foreach(_.shutdown())
    def delete(f: java.io.File): Unit = { Option(f.listFiles()).foreach(_.foreach(delete)); f.delete() }
    delete(dir)
  }
}
