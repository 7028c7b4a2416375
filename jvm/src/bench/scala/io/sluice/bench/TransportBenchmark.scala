package io.sluice.bench

import java.lang.management.ManagementFactory
import java.util.Locale
import java.util.concurrent.atomic.{AtomicBoolean, AtomicLong}

import scala.collection.mutable

import io.sluice.config.{SluiceConf, SluiceOptions}
import io.sluice.memory.NetworkBufferPool
import io.sluice.netty.NettyConnectionManager
import io.sluice.partition.{PipelinedResultPartition, ResultPartitionID, ResultPartitionManager}
import io.sluice.partition.consumer.{GateInput, InputGateFactory, ProducerLocation}
import io.sluice.serialization.{RecordView, SpanningRecordDeserializer}
import io.sluice.writer.{ChannelSelector, OutputFlusher, RecordSerializer, RecordWriter, SerializedRecord}
import org.apache.spark.network.util.{MapConfigProvider, TransportConf}
import org.apache.spark.shuffle.sluice.internal.TransportConfOverlay
import org.apache.spark.unsafe.Platform

/**
 * Throughput of the transport between two executors in one JVM over loopback (a benchmark, never
 * a test): executor A's producer writes records through a RecordWriter into a pipelined result
 * partition (flushed by an OutputFlusher every buffer timeout, or after every record with 0), and
 * executor B's consumer reads them through one remote input gate with one channel per
 * subpartition, deserialising every record. All channels share B's one connection to A.
 *
 * Every configuration (channels x record size x buffer timeout) is measured `--repeats` times;
 * the repetitions alternate (the whole matrix once, then again) so drift hits all alike. Before
 * the first measured pass, `--jvm-warmup` seconds of every configuration run unmeasured: without
 * it the first configurations of a JVM (100 B records at 0 and 1 ms) ran while the JIT was still
 * compiling the paths they share with the rest, and came out slower for that alone. Prints one
 * JSON line per run, then one line per configuration with the median.
 *
 * {{{
 *   java <Spark's --add-opens> -cp sluice-bench.jar:sluice.jar:<pyspark>/jars/'*' io.sluice.bench.TransportBenchmark \
 *     [--seconds 3] [--warmup 1] [--jvm-warmup 0] [--repeats 3] [--channels 1,10,100] [--record-sizes 100,10240]
 *     [--timeouts 0,1,2,5,10,100] [--modes remote,local] [--spark.sluice.KEY VALUE ...]
 * }}}
 */
object TransportBenchmark {

  /** `local`: the consumer runs in the producer's executor (local channels, no network): the ceiling of the rest. */
  final case class Config(channels: Int, recordSize: Int, bufferTimeoutMs: Long, local: Boolean = false)

  /**
   * @param buffers     buffers the consumer took from its gate in the window
   * @param cpuNanos    CPU time of the whole process in the window (every thread, GC and JIT included)
   * @param threadNanos CPU time of the threads that move the data, by role (producer, flusher,
   *                    server event loop, client event loop, consumer, everything else)
   */
  final case class Result(config: Config, repeat: Int, seconds: Double, records: Long, recordBytes: Long, wireBytes: Long,
      buffers: Long, creditMessages: Long, cpuNanos: Long, threadNanos: Map[String, Long], wakeUps: Map[String, Long]) {
    def recordsPerSec: Double = records / seconds
    def gbps: Double = recordBytes * 8 / seconds / 1e9
    def wireGbps: Double = wireBytes * 8 / seconds / 1e9
    def buffersPerSec: Double = buffers / seconds

    /** CPU-microseconds the process spent per buffer moved end to end. */
    def cpuMicrosPerBuffer: Double = if (buffers == 0) 0.0 else cpuNanos / 1e3 / buffers

    /** Cores busy on average. */
    def cores: Double = cpuNanos / 1e9 / seconds
    def threadMicrosPerBuffer(role: String): Double =
      if (buffers == 0) 0.0 else threadNanos.getOrElse(role, 0L) / 1e3 / buffers

    /** Times the role's threads blocked and were woken again (voluntary context switches) per buffer. */
    def wakeUpsPerBuffer(role: String): Double = if (buffers == 0) 0.0 else wakeUps.getOrElse(role, 0L).toDouble / buffers
  }

  /** The roles [[Result.threadNanos]] names, in the order the output lists them. */
  val Roles: Seq[String] = Seq("producer", "flusher", "serverLoop", "clientLoop", "consumer", "other")

  /** The role of a thread by its name (or by its name as Linux keeps it, cut to 15 characters). */
  private def roleOf(threadName: String): String =
    if (threadName == "bench-producer") "producer"
    else if (threadName == "bench-consumer") "consumer"
    else if (threadName.startsWith("sluice-bench-fl")) "flusher"
    else if (threadName.contains("-server-")) "serverLoop"
    else if (threadName.contains("-client-")) "clientLoop"
    else "other"

  def main(args: Array[String]): Unit = {
    val opts = BenchOptions.parse(args)
    val seconds = opts.getOrElse("seconds", "3").toDouble
    val warmup = opts.getOrElse("warmup", "1").toDouble
    val jvmWarmup = opts.getOrElse("jvm-warmup", "0").toDouble
    val repeats = opts.getOrElse("repeats", "3").toInt
    val channels = ints(opts.getOrElse("channels", "1,10,100"))
    val sizes = ints(opts.getOrElse("record-sizes", "100,10240"))
    val timeouts = ints(opts.getOrElse("timeouts", "0,1,2,5,10,100")).map(_.toLong)
    val modes = opts.getOrElse("modes", "remote").split(",").map(_.trim).toSeq
    require(modes.forall(Set("remote", "local")), s"--modes takes remote and/or local, not ${modes.mkString(",")}")
    val sluice = SluiceConf(opts.collect { case (k, v) if k.startsWith("spark.sluice.") => k -> v })
    // Spark's setting for pipelined buffers' CRC32C in transit (on by default, as in Spark).
    val checksums = opts.getOrElse("spark.shuffle.streaming.checksum.enabled", "true").toBoolean

    val configs = for (m <- modes; c <- channels; s <- sizes; t <- timeouts) yield Config(c, s, t, m == "local")
    val bench = new TransportBenchmark(sluice, checksums)
    try {
      val results = mutable.ArrayBuffer.empty[Result]
      if (jvmWarmup > 0) for (c <- configs) {
        val res = bench.run(c, 0, 0.0, jvmWarmup)
        println(json("jvmWarmup", res.config, Seq("seconds" -> res.seconds, "gbps" -> res.gbps)))
      }
      for (r <- 1 to repeats; c <- configs) {
        val res = bench.run(c, r, warmup, seconds)
        results += res
        println(json("run", res.config,
            Seq("repeat" -> res.repeat, "seconds" -> res.seconds, "records" -> res.records,
              "recordsPerSec" -> res.recordsPerSec, "gbps" -> res.gbps, "wireGbps" -> res.wireGbps,
              "bytesPerBuffer" -> (if (res.buffers == 0) 0.0 else res.wireBytes.toDouble / res.buffers),
              "addCreditPerBuffer" -> (if (res.buffers == 0) 0.0 else res.creditMessages.toDouble / res.buffers),
              "buffersPerSec" -> res.buffersPerSec, "cpuMicrosPerBuffer" -> res.cpuMicrosPerBuffer, "cores" -> res.cores) ++
              Roles.map(role => s"${role}MicrosPerBuffer" -> res.threadMicrosPerBuffer(role)) ++
              Roles.map(role => s"${role}WakeUpsPerBuffer" -> res.wakeUpsPerBuffer(role))))
      }
      for (c <- configs) {
        val rs = results.filter(_.config == c).sortBy(_.gbps)
        val med = rs(rs.size / 2)
        val cpu = rs.map(_.cpuMicrosPerBuffer).sorted
        println(json("median", c,
            Seq("repeats" -> rs.size, "recordsPerSec" -> med.recordsPerSec, "gbps" -> med.gbps,
              "wireGbps" -> med.wireGbps, "minGbps" -> rs.head.gbps, "maxGbps" -> rs.last.gbps,
              "cpuMicrosPerBuffer" -> cpu(cpu.size / 2))))
      }
    } finally bench.close()
  }

  private def ints(s: String): Seq[Int] = s.split(",").map(_.trim.toInt).toSeq

  private def json(kind: String, c: Config, fields: Seq[(String, Any)]): String = {
    val all =
      Seq("kind" -> kind, "mode" -> (if (c.local) "local" else "remote"), "channels" -> c.channels, "recordSize" -> c.recordSize,
        "bufferTimeoutMs" -> c.bufferTimeoutMs) ++ fields
    all.map { case (k, v) =>
      val value = v match {
        case s: String => "\"" + s + "\""
        case d: Double => String.format(Locale.ROOT, "%.4f", Double.box(d))
        case other => other.toString
      }
      "\"" + k + "\":" + value
    }.mkString("{", ",", "}")
  }
}

/** Two executors (A produces, B consumes) that live for the whole benchmark; one connection B -> A. */
final class TransportBenchmark(conf: SluiceConf, checksums: Boolean = true) {
  import TransportBenchmark._

  private val transportConf = TransportConfOverlay(new TransportConf("sluice",
      new MapConfigProvider(java.util.Map.of(
          "spark.sluice.io.serverThreads", "1", "spark.sluice.io.clientThreads", "1"))), conf)

  private final class Executor(val id: String) {
    val pool = new NetworkBufferPool(conf.numberOfPoolSegments, conf.segmentSize)
    val partitions = new ResultPartitionManager
    val connections = new NettyConnectionManager(conf, transportConf, partitions, None, "127.0.0.1",
      org.apache.spark.shuffle.sluice.internal.SparkInternals.TransportPipeline)
    val port: Int = connections.start()
    val gates = new InputGateFactory(conf, pool, partitions, connections, id)
    def close(): Unit = { connections.shutdown(); partitions.shutdown() }
  }

  private val a = new Executor("A")
  private val b = new Executor("B")
  private val flusher = new OutputFlusher("sluice-bench-flusher")
  private var nextShuffle = 0

  def run(c: Config, repeat: Int, warmupSeconds: Double, seconds: Double): Result = {
    nextShuffle += 1
    val id = ResultPartitionID(nextShuffle, 0)
    // The producer's pool mirrors a consumer gate's: buffersPerChannel per subpartition plus the floating ones.
    val poolSize = c.channels * conf.get(SluiceOptions.BuffersPerChannel) + conf.get(SluiceOptions.FloatingBuffersPerGate)
    val partition = new PipelinedResultPartition(id, c.channels,
      a.pool.createBufferPool(c.channels, poolSize, s"bench partition $id"),
      conf.get(SluiceOptions.MaxBuffersPerSubpartition), conf.get(SluiceOptions.RequestBufferTimeout), a.partitions.unregister,
      c.bufferTimeoutMs, conf.get(SluiceOptions.IdleFlushInterval), Some(flusher), checksums) // as ShuffleEnvironment makes them
    a.partitions.registerResultPartition(partition)
    val consumerSide = if (c.local) a else b
    val gate = consumerSide.gates.create("bench consumer",
      (0 until c.channels).map(i =>
        GateInput(id, i, i + 1, ProducerLocation("A", "127.0.0.1", a.port))), None, waitForProducers = false,
      pipelined = true)

    val stop = new AtomicBoolean(false)
    val producer = new Thread(() => {
        val record = Array.tabulate[Byte](c.recordSize)(_.toByte)
        val writer = new RecordWriter[Array[Byte]](partition, new RoundRobin(c.channels), BytesSerializer,
          flushAlways = c.bufferTimeoutMs == 0)
        val registration = if (c.bufferTimeoutMs > 0) Some(flusher.register(partition, c.bufferTimeoutMs)) else None
        try {
          while (!stop.get) { var i = 0; while (i < 64) { writer.emit(record); i += 1 } }
          partition.finish()
        } finally registration.foreach(_.cancel())
      }, "bench-producer")

    val records = new AtomicLong
    val recordBytes = new AtomicLong
    val wireBytes = new AtomicLong
    val buffers = new AtomicLong
    val consumer = new Thread(() => {
        val deserializers = Array.fill(c.channels)(new SpanningRecordDeserializer)
        val view = new RecordView
        var next = gate.getNext()
        while (next != null) {
          val d = deserializers(next.input)
          d.setNextBuffer(next.buffer)
          wireBytes.addAndGet(next.buffer.readableBytes().toLong)
          buffers.incrementAndGet()
          var n = 0L; var bytes = 0L
          while (d.readNext(view) == SpanningRecordDeserializer.Record) { n += 1; bytes += view.length }
          records.addAndGet(n); recordBytes.addAndGet(bytes)
          next.buffer.release()
          next = gate.getNext()
        }
      }, "bench-consumer")

    producer.start(); consumer.start()
    Thread.sleep((warmupSeconds * 1000).toLong)
    val (r0, b0, w0, t0) = (records.get, recordBytes.get, wireBytes.get, System.nanoTime())
    val (n0, m0) = (buffers.get, b.connections.counters.addCreditMessages.sum)
    val (cpu0, threads0, switches0) = (processCpuNanos(), threadCpuNanos(), voluntarySwitches())
    Thread.sleep((seconds * 1000).toLong)
    val (r1, b1, w1, t1) = (records.get, recordBytes.get, wireBytes.get, System.nanoTime())
    val (n1, m1) = (buffers.get, b.connections.counters.addCreditMessages.sum)
    val (cpu1, threads1, switches1) = (processCpuNanos(), threadCpuNanos(), voluntarySwitches())
    stop.set(true)
    producer.join(); consumer.join()
    gate.close()
    partition.awaitConsumed(60000)
    val byRole = threads1.toSeq.map { case (tid, (name, nanos)) =>
      roleOf(name) -> (nanos - threads0.get(tid).map(_._2).getOrElse(0L))
    }.groupMapReduce(_._1)(_._2)(_ + _)
    val wakeUps = switches1.toSeq.map { case (tid, (name, n)) =>
      roleOf(name) -> (n - switches0.get(tid).map(_._2).getOrElse(0L))
    }.groupMapReduce(_._1)(_._2)(_ + _)
    Result(c, repeat, (t1 - t0) / 1e9, r1 - r0, b1 - b0, w1 - w0, n1 - n0, m1 - m0, cpu1 - cpu0, byRole, wakeUps)
  }

  private val os = ManagementFactory.getOperatingSystemMXBean.asInstanceOf[com.sun.management.OperatingSystemMXBean]
  private val threadBean = ManagementFactory.getThreadMXBean

  private def processCpuNanos(): Long = os.getProcessCpuTime

  /**
   * Voluntary context switches of every thread of the process (Linux: /proc/self/task/TID/status):
   * native thread id -> (name, count); empty elsewhere. Each is a thread that blocked (a wait, a
   * park, an epoll_wait with nothing ready) and was woken: the hand-offs between threads.
   */
  private def voluntarySwitches(): Map[Long, (String, Long)] = {
    val tasks = new java.io.File("/proc/self/task").listFiles()
    if (tasks == null) Map.empty
    else tasks.iterator.flatMap { t =>
      try {
        val status = java.nio.file.Files.readAllLines(new java.io.File(t, "status").toPath)
        var name = ""; var n = -1L
        status.forEach { line =>
          if (line.startsWith("Name:")) name = line.substring(5).trim
          else if (line.startsWith("voluntary_ctxt_switches:")) n = line.substring(24).trim.toLong
        }
        if (n < 0) None else Some(t.getName.toLong -> (name, n))
      } catch { case _: java.io.IOException | _: NumberFormatException => None } // the thread ended
    }.toMap
  }

  /** CPU time of every live thread: id -> (name, nanoseconds). */
  private def threadCpuNanos(): Map[Long, (String, Long)] =
    threadBean.getThreadInfo(threadBean.getAllThreadIds).iterator.filter(_ != null).map { info =>
      info.getThreadId -> (info.getThreadName, math.max(0L, threadBean.getThreadCpuTime(info.getThreadId)))
    }.toMap

  def close(): Unit = { flusher.shutdown(); b.close(); a.close() }

  private final class RoundRobin(n: Int) extends ChannelSelector[Array[Byte]] {
    private var next = -1
    override def numberOfChannels: Int = n
    override def selectChannel(record: Array[Byte]): Int = { next += 1; if (next == n) next = 0; next }
  }

  private object BytesSerializer extends RecordSerializer[Array[Byte]] {
    override def serialize(record: Array[Byte], subpartition: Int, target: SerializedRecord): Unit =
      target.point(record, Platform.BYTE_ARRAY_OFFSET, record.length)
  }
}
