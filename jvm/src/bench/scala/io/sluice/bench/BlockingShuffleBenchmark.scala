package io.sluice.bench

import java.io.File
import java.nio.file.Files
import java.util.Locale

import scala.collection.mutable

import io.sluice.buffer.BlockCodec
import io.sluice.config.{SluiceConf, SluiceOptions}
import io.sluice.memory.NetworkBufferPool
import io.sluice.netty.NettyConnectionManager
import io.sluice.partition.{
  DataBuffer, PartitionedFile, PartitionedFileCipher, ResultPartitionID, ResultPartitionManager, SortMergeResultPartition
}
import io.sluice.partition.consumer.{GateInput, InputGateFactory, ProducerLocation}
import io.sluice.serialization.{RecordView, SpanningRecordDeserializer}
import org.apache.spark.network.util.{MapConfigProvider, TransportConf}
import org.apache.spark.shuffle.sluice.internal.TransportConfOverlay
import org.apache.spark.unsafe.Platform

/**
 * Throughput of a blocking partition with and without Spark's I/O encryption (a benchmark, never
 * a test): executor A's producer writes `--megabytes` of records into a sort-merge partition file
 * (encrypting each buffer as it is staged, when on), then a consumer reads the whole partition
 * through one gate with one channel per subpartition: from executor B over loopback (`remote`: A's
 * read threads send the file's bytes as they lie in it, and B's gate decrypts them) or in A
 * itself (`local`: read from the file into the gate's buffer, then decrypted). Every record is
 * deserialised. The file is read right after it was written, so from the page cache: what is
 * measured is CPU and memory bandwidth, where encryption's cost shows, not the disk. Phase
 * `cipher` is the cipher alone: one thread encrypting segment-sized buffers in memory.
 *
 * After `--warmups` unrecorded rounds, each repetition writes and reads once without and once with
 * encryption, alternating, so drift hits both alike. Prints one JSON line per measurement, then
 * the medians. `--layout` fixes the data buffer's layout (by default the product picks it from the
 * pool's size, see [[io.sluice.partition.DataBuffer]]), to compare the two on the same data.
 *
 * {{{
 *   java <Spark's --add-opens> -cp sluice.jar:<pyspark>/jars/'*' io.sluice.bench.BlockingShuffleBenchmark \
 *     [--megabytes 256] [--record-size 1024] [--subpartitions 4] [--repeats 5] [--warmups 1] [--modes remote,local]
 *     [--codec none|lz4|zstd|...] [--key-bits 128] [--layout auto|hash|sort] [--spark.sluice.KEY VALUE ...]
 * }}}
 */
object BlockingShuffleBenchmark {

  final case class Result(encrypted: Boolean, phase: String, repeat: Int, seconds: Double, bytes: Long, records: Long) {
    def gbps: Double = bytes * 8 / seconds / 1e9
  }

  def main(args: Array[String]): Unit = {
    val opts = BenchOptions.parse(args)
    val megabytes = opts.getOrElse("megabytes", "256").toLong
    val recordSize = opts.getOrElse("record-size", "1024").toInt
    val subpartitions = opts.getOrElse("subpartitions", "4").toInt
    val repeats = opts.getOrElse("repeats", "5").toInt
    val warmups = opts.getOrElse("warmups", "1").toInt
    val modes = opts.getOrElse("modes", "remote,local").split(",").map(_.trim).toSeq
    require(modes.forall(Set("remote", "local")), s"--modes takes remote and/or local, not ${modes.mkString(",")}")
    val codecName = opts.getOrElse("codec", "none")
    val keyBits = opts.getOrElse("key-bits", "128").toInt
    val layout = opts.getOrElse("layout", "auto")
    val hashBased: (Int, Int) => Boolean = layout match {
      case "auto" => DataBuffer.hashBased
      case "hash" => (_, _) => true
      case "sort" => (_, _) => false
      case other => throw new IllegalArgumentException(s"--layout takes auto, hash or sort, not $other")
    }
    val sluice = SluiceConf(opts.collect { case (k, v) if k.startsWith("spark.sluice.") => k -> v }.toSeq)

    val key = new Array[Byte](keyBits / 8)
    new java.security.SecureRandom().nextBytes(key)
    val cipher = PartitionedFileCipher(key, PartitionedFileCipher.Transformation)
    val codec = if (codecName == "none") None else Some(() => BlockCodec.forSparkCodec(codecName, 1))
    val bench = new BlockingShuffleBenchmark(sluice, cipher, codec, subpartitions, recordSize, megabytes << 20, hashBased)
    try {
      // Unrecorded rounds first: JIT compilation, the connection B -> A, the page cache's first pages.
      for (_ <- 1 to warmups; encrypted <- Seq(false, true)) bench.run(encrypted, modes, 0)
      val results = mutable.ArrayBuffer.empty[Result]
      for (r <- 1 to repeats; encrypted <- Seq(false, true)) {
        val rs = bench.run(encrypted, modes, r) ++ (if (encrypted) Seq(bench.cipherOnly(r)) else Nil)
        rs.foreach(res =>
          println(json(res,
              Seq("kind" -> "run", "repeat" -> res.repeat, "seconds" -> res.seconds,
                "records" -> res.records, "gbps" -> res.gbps))))
        results ++= rs
      }
      for ((phase, encrypted) <- results.map(r => (r.phase, r.encrypted)).distinct) {
        val rs = results.filter(r => r.phase == phase && r.encrypted == encrypted).sortBy(_.gbps)
        val med = rs(rs.size / 2)
        println(json(med,
            Seq("kind" -> "median", "repeats" -> rs.size, "gbps" -> med.gbps, "minGbps" -> rs.head.gbps,
              "maxGbps" -> rs.last.gbps, "codec" -> codecName, "recordSize" -> recordSize, "subpartitions" -> subpartitions,
              "megabytes" -> megabytes, "keyBits" -> keyBits, "layout" -> layout)))
      }
    } finally bench.close()
  }

  private def json(r: Result, fields: Seq[(String, Any)]): String =
    (Seq("phase" -> r.phase, "encrypted" -> r.encrypted) ++ fields).map { case (k, v) =>
      val value = v match {
        case s: String => "\"" + s + "\""
        case d: Double => String.format(Locale.ROOT, "%.4f", Double.box(d))
        case other => other.toString
      }
      "\"" + k + "\":" + value
    }.mkString("{", ",", "}")
}

/** Two executors (A produces, B reads remotely) that live for the whole benchmark, both with the same I/O key. */
final class BlockingShuffleBenchmark(conf: SluiceConf, cipher: PartitionedFileCipher, codec: Option[() => BlockCodec],
    subpartitions: Int, recordSize: Int, totalBytes: Long, hashBased: (Int, Int) => Boolean) {
  import BlockingShuffleBenchmark.Result

  private val transportConf = TransportConfOverlay(new TransportConf("sluice",
      new MapConfigProvider(java.util.Map.of(
          "spark.sluice.io.serverThreads", "1", "spark.sluice.io.clientThreads", "1"))), conf)
  private val dir = Files.createTempDirectory("sluice-blocking-bench").toFile

  private final class Executor(val id: String) {
    val pool = new NetworkBufferPool(conf.numberOfPoolSegments, conf.segmentSize)
    val partitions = new ResultPartitionManager
    val connections = new NettyConnectionManager(conf, transportConf, partitions, None, "127.0.0.1",
      org.apache.spark.shuffle.sluice.internal.SparkInternals.TransportPipeline)
    val port: Int = connections.start()
    val gates = new InputGateFactory(conf, pool, partitions, connections, id, Some(cipher))
    def close(): Unit = { connections.shutdown(); partitions.shutdown(); pool.destroy() }
  }

  private val a = new Executor("A")
  private val b = new Executor("B")
  private var nextShuffle = 0
  // Incompressible record bytes: records are windows of this at varying offsets.
  private val source = { val s = new Array[Byte](1 << 20); new java.util.Random(1).nextBytes(s); s }

  /** Writes one partition (encrypted or not), reads it in each mode, releases it. */
  def run(encrypted: Boolean, modes: Seq[String], repeat: Int): Seq[Result] = {
    nextShuffle += 1
    val id = ResultPartitionID(nextShuffle, 0)
    val maxBuffers = math.max(1L, conf.get(SluiceOptions.SortBufferSize) / conf.segmentSize).toInt
    val file = PartitionedFile.create(new File(dir, s"bench-${id.shuffleId}.part"), subpartitions, codec.map(_.apply()),
      if (encrypted) Some(cipher) else None)
    val partition = new SortMergeResultPartition(id, subpartitions,
      a.pool.createBufferPool(1, maxBuffers, s"bench partition $id"), file, conf.get(SluiceOptions.RequestBufferTimeout),
      hashBased)
    try {
      val start = System.nanoTime()
      var written = 0L
      var records = 0L
      var at = 0
      while (written < totalBytes) {
        if (at + recordSize > source.length) at = 0
        partition.emitRecord((records % subpartitions).toInt, source, Platform.BYTE_ARRAY_OFFSET + at.toLong, recordSize)
        at += 97
        written += recordSize
        records += 1
      }
      partition.finish()
      val write = Result(encrypted, "write", repeat, (System.nanoTime() - start) / 1e9, written, records)
      a.partitions.registerResultPartition(partition)
      write +: modes.map { m =>
        val r = read(partition, encrypted, if (m == "local") a else b, m, repeat)
        require(r.records == records && r.bytes == written, s"$m read $r of ${records} records, $written bytes written")
        r
      }
    } finally a.partitions.releasePartition(id, null)
  }

  /** The cipher alone: `totalBytes` encrypted in place, one segment-sized direct buffer at a time. */
  def cipherOnly(repeat: Int): Result = {
    val buffer = java.nio.ByteBuffer.allocateDirect(conf.segmentSize)
    val address = io.netty.util.internal.PlatformDependent.directBufferAddress(buffer)
    val bc = cipher.newBufferCipher()
    val iv = cipher.newFileIv()
    val start = System.nanoTime()
    var done = 0L
    while (done < totalBytes) { bc.encrypt(address, conf.segmentSize, iv.plus(done)); done += conf.segmentSize }
    Result(encrypted = true, "cipher", repeat, (System.nanoTime() - start) / 1e9, done, done / conf.segmentSize)
  }

  private def read(partition: SortMergeResultPartition, encrypted: Boolean, reader: Executor, mode: String,
      repeat: Int): Result = {
    val producer = ProducerLocation("A", "127.0.0.1", a.port)
    val gate = reader.gates.create(s"bench $mode reader",
      (0 until subpartitions).map(s =>
        GateInput(partition.partitionId, s, s + 1, producer)), codec.map(_.apply()), waitForProducers = false,
      pipelined = false)
    val start = System.nanoTime()
    val deserializers = Array.fill(subpartitions)(new SpanningRecordDeserializer)
    val view = new RecordView
    var records = 0L
    var bytes = 0L
    try {
      var next = gate.getNext()
      while (next != null) {
        val d = deserializers(next.input)
        d.setNextBuffer(next.buffer)
        while (d.readNext(view) == SpanningRecordDeserializer.Record) { records += 1; bytes += view.length }
        next.buffer.release()
        next = gate.getNext()
      }
    } finally gate.close()
    Result(encrypted, mode, repeat, (System.nanoTime() - start) / 1e9, bytes, records)
  }

  def close(): Unit = {
    b.close(); a.close()
    Option(dir.listFiles()).foreach(_.foreach(_.delete()))
    dir.delete()
  }
}
