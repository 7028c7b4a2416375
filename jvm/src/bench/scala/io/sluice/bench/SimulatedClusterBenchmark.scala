package io.sluice.bench

import java.util.Locale

import io.sluice.config.SluiceOptions
import org.apache.spark.shuffle.sluice.bench.SimulatedCluster
import io.sluice.netty.PartitionRequestClientFactory

/**
 * What grows per executor as a cluster widens (a benchmark, never a test): for each executor count,
 * a [[SimulatedCluster]] of that many executors in this JVM runs one shuffle of `--maps` x
 * `--reducers` and reports, per executor, the heap it retains, its gates' peak network memory,
 * index bytes read against needed, connections, descriptors and threads (medians and maxima over
 * the executors, and each executor's figures). With `--index-cache-sizes` it runs once per size:
 * index reads against what readers needed, at every cache size.
 *
 * One JVM holds every executor, so descriptors are the limit: when every executor reducing would
 * connect more executor pairs than the descriptor limit allows, only `--reduce-executors` run
 * reducers (default: as many as fit) and each prepares connections to `--prepare-peers` peers
 * (default: Sluice's bound, fewer when that would not fit); the JSON records both.
 *
 * {{{
 *   java <Spark's --add-opens> -Xmx3g -XX:MaxDirectMemorySize=2g -cp sluice-bench.jar:sluice.jar:<pyspark>/jars/'*' \
 *     io.sluice.bench.SimulatedClusterBenchmark [--executors 16,64,256] [--maps-per-executor 4]
 *     [--reducers-per-executor 2] [--maps M --reducers R] [--records-per-block 1] [--record-size 32] [--slots 2]
 *     [--reduce-executors K] [--prepare-peers P] [--index-cache-sizes 0,1m,32m,1g] [--spark.sluice.KEY VALUE ...]
 * }}}
 * Prints one JSON object per run (`"kind":"run"`).
 */
object SimulatedClusterBenchmark {

  def main(args: Array[String]): Unit = {
    val opts = BenchOptions.parse(args)
    val counts = opts.getOrElse("executors", "16,64,256").split(",").map(_.trim.toInt).toSeq
    val settings = opts.collect { case (k, v) if k.startsWith("spark.sluice.") => k -> v }
    val cacheSizes = opts.get("index-cache-sizes").map(_.split(",").map(_.trim).toSeq).getOrElse(Seq(""))
    val slots = opts.getOrElse("slots", "2").toInt
    val recordsPerBlock = opts.getOrElse("records-per-block", "1").toInt
    val recordSize = opts.getOrElse("record-size", "32").toInt
    val limit = descriptorLimit
    for (n <- counts; cache <- cacheSizes) {
      val maps = opts.get("maps").map(_.toInt).getOrElse(n * opts.getOrElse("maps-per-executor", "4").toInt)
      val reducers = opts.get("reducers").map(_.toInt).getOrElse(n * opts.getOrElse("reducers-per-executor", "2").toInt)
      val plan = Plan.of(n, maps, limit, opts.get("reduce-executors").map(_.toInt), opts.get("prepare-peers").map(_.toInt))
      val runSettings = settings ++ (if (cache.isEmpty) Nil else Seq(SluiceOptions.IndexCacheSize.key -> cache))
      println(run(n, slots, runSettings, plan, maps, reducers, recordsPerBlock, recordSize, cache, limit))
    }
  }

  /**
   * Which executors reduce and how many peers each prepares connections to, so that the sockets of
   * this JVM (two per connection, both ends being here) and the kept partition files (two
   * descriptors each) stay under `limit` with a margin.
   */
  final case class Plan(reduceExecutors: IndexedSeq[Int], preparePeers: Int)

  object Plan {
    def of(n: Int, maps: Int, limit: Long, reduce: Option[Int], prepare: Option[Int]): Plan = {
      val budget = limit - 2000L - 2L * maps - 16L * n // descriptors left for sockets
      def sockets(k: Int, p: Int): Long = 2L * (k.toLong * (n - 1) + n.toLong * p) + n
      val peers = prepare.getOrElse {
        val wanted = math.min(PartitionRequestClientFactory.MaxPreparedConnections, n - 1)
        Iterator.iterate(wanted)(_ / 2).find(p => p == 0 || sockets(0, p) <= budget / 2).getOrElse(0)
      }
      val k = reduce.getOrElse((n to 1 by -1).find(k => sockets(k, peers) <= budget).getOrElse(1))
      // Spread evenly over the executors.
      Plan((0 until k).map(i => (i.toLong * n / k).toInt), peers)
    }
  }

  private def run(n: Int, slots: Int, settings: Map[String, String], plan: Plan, maps: Int, reducers: Int,
      recordsPerBlock: Int, recordSize: Int, cache: String, limit: Long): String = {
    val started = System.nanoTime()
    val cluster = SimulatedCluster.start(n, slots, settings)
    var problems: Seq[String] = Nil
    var closed = false
    try {
      val startSeconds = (System.nanoTime() - started) / 1e9
      val prepared = cluster.prepareConnections(plan.preparePeers)
      val times = cluster.runShuffle(maps, reducers, recordsPerBlock, recordSize, plan.reduceExecutors)
      val m = cluster.measure()
      cluster.releaseShuffle(times.shuffleId)
      problems = cluster.shutdown()
      closed = true
      val es = m.executors
      def stats(name: String, f: SimulatedCluster.ExecutorFigures => Double): (String, String) = {
        val v = es.map(f).sorted
        name -> s"""{"median":${num(v(v.size / 2))},"max":${num(v.last)},"min":${num(v.head)}}"""
      }
      val reading = es.filter(_.reducers > 0)
      val fields = Seq(
        "kind" -> "\"run\"",
        "executors" -> n.toString, "slots" -> slots.toString, "maps" -> maps.toString, "reducers" -> reducers.toString,
        "records_per_block" -> recordsPerBlock.toString, "record_size" -> recordSize.toString,
        "reduce_executors" -> plan.reduceExecutors.size.toString, "prepare_peers" -> plan.preparePeers.toString,
        "descriptor_limit" -> limit.toString,
        "index_cache_size" -> ("\"" + (if (cache.isEmpty) SluiceOptions.IndexCacheSize.default.toString else cache) + "\""),
        "start_s" -> num(startSeconds), "map_s" -> num(times.mapSeconds), "reduce_s" -> num(times.reduceSeconds),
        "connections_prepared" -> prepared.toString,
        "index_bytes_read" -> m.indexBytesRead.toString, "index_bytes_needed" -> m.indexBytesNeeded.toString,
        "index_read_ratio" -> num(m.indexReadRatio),
        "heap_retained_per_executor" -> m.heapRetainedPerExecutor.toString,
        "other_descriptors_per_executor" -> num(m.otherDescriptorsPerExecutor),
        "read_from" -> reading.map(_.readFrom).sum.toString,
        "read_from_prepared" -> reading.map(_.readFromPrepared).sum.toString,
        "buffers_and_threads_back" -> problems.isEmpty.toString,
        "problems" -> problems.map(p => "\"" + escape(p) + "\"").mkString("[", ",", "]"),
        "per_executor" -> Seq(
          stats("index_cache_bytes", _.indexCacheBytes.toDouble),
          stats("peak_gate_segments", _.peakGateSegments.toDouble),
          stats("peak_gate_bytes", _.peakGateBytes.toDouble),
          stats("index_read_ratio", _.indexReadRatio),
          stats("client_connections", _.clientConnections.toDouble),
          stats("server_connections", _.serverConnections.toDouble),
          stats("connections_opened", _.connectionsOpened.toDouble),
          stats("fd_files", _.fdFiles.toDouble),
          stats("fd_sockets", _.fdSockets.toDouble),
          stats("threads", _.threads.toDouble)).map { case (k, v) => "\"" + k + "\":" + v }.mkString("{", ",", "}"),
        "executor_figures" -> es.map(figures).mkString("[", ",", "]"))
      fields.map { case (k, v) => "\"" + k + "\":" + v }.mkString("{", ",", "}")
    } finally if (!closed) {
        try cluster.shutdown()
        catch { case _: Throwable => () }
      }
  }

  private def figures(e: SimulatedCluster.ExecutorFigures): String = Seq(
    "id" -> ("\"" + e.id + "\""), "maps" -> e.maps.toString, "reducers" -> e.reducers.toString,
    "records" -> e.records.toString, "index_cache_bytes" -> e.indexCacheBytes.toString,
    "peak_gate_segments" -> e.peakGateSegments.toString, "peak_gate_bytes" -> e.peakGateBytes.toString,
    "index_bytes_read" -> e.indexBytesRead.toString, "index_bytes_needed" -> e.indexBytesNeeded.toString,
    "client_connections" -> e.clientConnections.toString, "server_connections" -> e.serverConnections.toString,
    "connections_opened" -> e.connectionsOpened.toString, "read_from" -> e.readFrom.toString,
    "read_from_prepared" -> e.readFromPrepared.toString, "fd_files" -> e.fdFiles.toString,
    "fd_sockets" -> e.fdSockets.toString, "fd_listening" -> e.fdListening.toString, "fd_accepted" -> e.fdAccepted.toString,
    "fd_client" -> e.fdClient.toString, "threads" -> e.threads.toString)
    .map { case (k, v) => "\"" + k + "\":" + v }.mkString("{", ",", "}")

  private def num(d: Double): String = if (d.isNaN || d.isInfinite) "null" else String.format(Locale.ROOT, "%.4f", Double.box(d))

  private def escape(s: String): String = s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ")

  /** This process's open-files limit (Linux: /proc/self/limits), or a conservative guess elsewhere. */
  private def descriptorLimit: Long =
    try {
      val line = java.nio.file.Files.readAllLines(java.nio.file.Paths.get("/proc/self/limits")).toArray.map(_.toString)
        .find(_.startsWith("Max open files"))
      line.flatMap(_.split("\\s+").drop(3).headOption).flatMap(_.toLongOption).getOrElse(4096L)
    } catch { case _: Exception => 4096L }
}
