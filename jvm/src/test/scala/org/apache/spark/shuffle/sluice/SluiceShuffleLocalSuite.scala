package org.apache.spark.shuffle.sluice

import scala.jdk.CollectionConverters._
import scala.util.Random

import io.sluice.NettyLeakDetection
import io.sluice.metrics.MetricNames
import org.apache.spark.{HashPartitioner, Partitioner, ShuffleDependency, SparkConf, SparkContext, SparkEnv, TaskContext}
import org.apache.spark.rdd.{RDD, ShuffledRDD}
import org.apache.spark.serializer.KryoSerializer
import org.apache.spark.shuffle.sluice.internal.{SluiceLocation, SparkInternals}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * Sluice's Spark-facing write and read path on a real SparkContext (`local[2]`, one JVM): Spark's
 * scheduler runs the map tasks through [[SluiceShuffleWriter]] and the reduce tasks through
 * [[SluiceShuffleReader]], [[SluiceRecordIterator]] and [[ReadSideCombine]], exactly as on a
 * cluster, except that every map output is on the reading executor, so every gate reads through
 * one local channel (packed remote channels are covered by the engine's suites, such as
 * PackedInputChannelSuite, and by the local-cluster applications of the Python tests). Every
 * expected answer is computed from the input with plain Scala collections, never by Spark.
 *
 * The sort buffer is 1 MiB (32 segments of 32 KiB), so a shuffle with more than 16 reduce
 * partitions is written with the sort-based data buffer, and a 3 MiB record is larger than the
 * whole data buffer (spilled, then streamed to the partition file). Netty's leak detector fails a
 * test that leaves a network buffer unreleased.
 */
class SluiceShuffleLocalSuite extends AnyFunSuite with BeforeAndAfterAll with NettyLeakDetection {
  import SluiceShuffleLocalSuite._

  private var sc: SparkContext = _
  // Threads other suites of this JVM left (test helpers' task threads): not this suite's to judge.
  private var threadsBefore: Set[Thread] = Set.empty

  private def sluiceThreads: Set[Thread] =
    Thread.getAllStackTraces.keySet.asScala.filter(t => t.isAlive && t.getName.startsWith("sluice")).toSet

  override def beforeAll(): Unit = {
    super.beforeAll()
    threadsBefore = sluiceThreads
    val conf = new SparkConf(false)
      .setMaster("local[2]")
      .setAppName(getClass.getSimpleName)
      .set("spark.shuffle.manager", classOf[SluiceShuffleManager].getName)
      .set("spark.driver.host", "127.0.0.1")
      .set("spark.driver.bindAddress", "127.0.0.1")
      .set("spark.ui.enabled", "false")
      .set("spark.sluice.memory.sortBufferSize", "1m")
    sc = new SparkContext(conf)
  }

  override def afterAll(): Unit = {
    try {
      if (sc != null) sc.stop()
      sc = null
      assert(SluiceEnvironment.ifStarted.isEmpty, "stopping the SparkContext stops Sluice's shuffle environment")
      // Netty's event loops end a moment after they are told to (their quiet period).
      val deadline = System.nanoTime() + 20L * 1000 * 1000 * 1000
      def started = sluiceThreads -- threadsBefore
      while (started.nonEmpty && System.nanoTime() < deadline) Thread.sleep(50)
      assert(started.isEmpty, s"Sluice threads outlived the SparkContext: ${started.map(_.getName)}")
    } finally super.afterAll()
  }

  // ---- Input and expected answers -------------------------------------------------------------

  /** One RDD partition per map task, each emitting [[records]] of its index. */
  private def input(gen: Int => Seq[(Int, Long)] = records): RDD[(Int, Long)] =
    sc.parallelize(0 until NumMaps, NumMaps).flatMap(gen)

  private def allRecords(): Seq[(Int, Long)] = (0 until NumMaps).flatMap(records)

  /** The records of each reduce partition, each partition's sorted. */
  private def byPartition(rdd: RDD[(Int, Long)]): Map[Int, Seq[(Int, Long)]] =
    rdd.mapPartitionsWithIndex((p, it) => Iterator(p -> it.toVector)).collect().toMap.map { case (p, rs) => p -> rs.sorted }

  private def expectedByPartition(rs: Seq[(Int, Long)], partitioner: Partitioner): Map[Int, Seq[(Int, Long)]] =
    (0 until partitioner.numPartitions).map(p => p -> rs.filter(r => partitioner.getPartition(r._1) == p).sorted).toMap

  private def dependency(rdd: RDD[_]): ShuffleDependency[Int, Long, _] =
    rdd.dependencies.head.asInstanceOf[ShuffleDependency[Int, Long, _]]

  /** Sluice's executor-wide counter `name` (local mode: the driver JVM is the executor). */
  private def counter(name: String): Long = SluiceEnvironment.ifStarted.map(_.metrics.totals(name)).getOrElse(0L)

  /** How much each of `names` grew while `body` ran. */
  private def counting[T](names: String*)(body: => T): (T, Map[String, Long]) = {
    val before = names.map(n => n -> counter(n)).toMap
    val result = body
    (result, names.map(n => n -> (counter(n) - before(n))).toMap)
  }

  // ---- Tests ----------------------------------------------------------------------------------

  test("local mode: Spark runs the shuffle on Sluice, every map output read through a local channel") {
    assert(SparkEnv.get.blockingShuffleManager.isInstanceOf[SluiceShuffleManager], SparkEnv.get.blockingShuffleManager)
    val partitioner = new HashPartitioner(5)
    val shuffled = input().partitionBy(partitioner)
    val (result, counted) = counting(MetricNames.NumRecordsOut, MetricNames.NumRecordsIn, MetricNames.NumBuffersOut,
      MetricNames.NumBuffersInLocal, MetricNames.NumBuffersInRemote)(byPartition(shuffled))
    assert(result == expectedByPartition(allRecords(), partitioner))

    val dep = dependency(shuffled)
    assert(SparkEnv.get.shuffleManagerFor(dep).isInstanceOf[SluiceShuffleManager], "Spark routes the shuffle to Sluice")
    assert(dep.shuffleHandle.isInstanceOf[SluiceShuffleHandle[_, _, _]], dep.shuffleHandle.getClass)
    // Sluice's writer reports its own server in every MapStatus (the sort shuffle's would not).
    val locations = SparkInternals.mapSizesByExecutorId(dep.shuffleId, 0, NumMaps, 0, 5).map(_._1).toSeq
    assert(locations.nonEmpty && locations.forall(_.topologyInfo.exists(_.startsWith("sluice:"))), locations)
    assert(SluiceLocation.port(locations.head) == SluiceEnvironment.ifStarted.get.serverPort)
    // Sluice's own counters saw every record go out and come back, in buffers, all local.
    val n = allRecords().size.toLong
    assert(counted(MetricNames.NumRecordsOut) == n && counted(MetricNames.NumRecordsIn) == n, counted)
    assert(counted(MetricNames.NumBuffersOut) > 0 && counted(MetricNames.NumBuffersInLocal) > 0, counted)
    assert(counted(MetricNames.NumBuffersInRemote) == 0, counted)
  }

  test("reduceByKey: map-side combine writes one record per key and map, the read side merges the combiners") {
    // 48 reduce partitions: more than the 1 MiB sort buffer's 32 segments hold two each, so sort-based.
    val summed = input().reduceByKey(_ + _, 48)
    val (result, counted) = counting(MetricNames.NumRecordsOut, MetricNames.NumRecordsIn)(summed.collect())
    val expected = allRecords().groupMapReduce(_._1)(_._2)(_ + _)
    assert(result.length == expected.size, "one record per key")
    assert(result.toMap == expected)
    val combined = (0 until NumMaps).map(m => records(m).map(_._1).distinct.size).sum.toLong
    assert(counted(MetricNames.NumRecordsOut) == combined, counted)
    assert(counted(MetricNames.NumRecordsIn) == combined, counted)
    assert(dependency(summed).mapSideCombine)
  }

  test("combineByKey without map-side combine: every value is shuffled and combined on the read side") {
    val grouped = input().combineByKey[List[Long]]((v: Long) => List(v), (c: List[Long], v: Long) => v :: c,
      (a: List[Long], b: List[Long]) => a ::: b, new HashPartitioner(6), mapSideCombine = false)
    assert(!dependency(grouped).mapSideCombine)
    val (result, counted) = counting(MetricNames.NumRecordsOut)(grouped.mapValues(_.sorted).collect())
    assert(counted(MetricNames.NumRecordsOut) == allRecords().size, counted)
    val expected = allRecords().groupMap(_._1)(_._2).map { case (k, vs) => k -> vs.sorted.toList }
    assert(result.length == expected.size, "one record per key")
    assert(result.toMap == expected)
  }

  test("sortByKey: a range-partitioned shuffle read back in key order, descending") {
    val sorted = input().sortByKey(ascending = false, numPartitions = 3)
    val result = sorted.collect().toSeq
    val expectedKeys = allRecords().map(_._1).sorted(Ordering[Int].reverse)
    assert(result.map(_._1) == expectedKeys)
    assert(result.sorted == allRecords().sorted)
    assert(sorted.partitions.length == 3)
  }

  test("repartitionAndSortWithinPartitions with Kryo and a key ordering of its own") {
    val ordering: Ordering[Int] = Ordering.by((k: Int) => (k % 10, -k))
    val partitioner = new HashPartitioner(7)
    val shuffled = new ShuffledRDD[Int, Long, Long](input(), partitioner).setKeyOrdering(ordering)
      .setSerializer(new KryoSerializer(sc.getConf))
    val result = shuffled.mapPartitionsWithIndex((p, it) => Iterator(p -> it.toVector)).collect().toMap
    val expected = expectedByPartition(allRecords(), partitioner)
    for (p <- 0 until 7) {
      val keys = result(p).map(_._1)
      assert(keys == keys.sorted(ordering), s"partition $p is in the key ordering")
      assert(result(p).sorted == expected(p), s"partition $p")
    }
  }

  test("a key ordering with an aggregator: combined inside the sorter, with and without map-side combine") {
    val partitioner = new HashPartitioner(4)
    val expected = allRecords().groupMapReduce(_._1)(_._2)(_ + _)
    for (mapSideCombine <- Seq(true, false)) {
      val aggregated = new ShuffledRDD[Int, Long, Long](input(), partitioner)
        .setAggregator(new org.apache.spark.Aggregator[Int, Long, Long](identity, _ + _, _ + _))
        .setMapSideCombine(mapSideCombine)
        .setKeyOrdering(Ordering[Int].reverse)
      val result = aggregated.mapPartitionsWithIndex((p, it) => Iterator(p -> it.toVector)).collect().toMap
      for (p <- 0 until 4) {
        val keys = result(p).map(_._1)
        assert(keys == keys.distinct.sorted(Ordering[Int].reverse), s"partition $p: one record per key, descending")
        assert(keys.forall(partitioner.getPartition(_) == p))
      }
      assert(result.values.flatten.toMap == expected, s"mapSideCombine=$mapSideCombine")
    }
  }

  test("a reader over a range of map indexes and a range of reduce partitions reads exactly those records") {
    val partitioner = new HashPartitioner(8)
    val shuffled = input().partitionBy(partitioner)
    assert(shuffled.count() == allRecords().size) // runs the map stage; `shuffled` keeps the outputs alive
    val handle = dependency(shuffled).shuffleHandle
    val ranges = Seq((0, NumMaps, 0, 8), (1, 3, 0, 8), (0, NumMaps, 2, 5), (2, 3, 5, 6), (3, NumMaps, 7, 8),
      (0, 1, 0, 1), (1, 2, 3, 7))
    val read = sc.parallelize(ranges, ranges.size).map { case (startMap, endMap, start, end) =>
      val context = TaskContext.get()
      val reader = SparkEnv.get.blockingShuffleManager.getReader[Int, Long](handle, startMap, endMap, start, end, context,
        context.taskMetrics().createTempShuffleReadMetrics())
      (startMap, endMap, start, end) -> reader.read().map(r => (r._1, r._2)).toVector
    }.collect()
    for (((startMap, endMap, start, end), got) <- read) {
      val expected = (startMap until endMap).flatMap(records)
        .filter { case (k, _) => val p = partitioner.getPartition(k); p >= start && p < end }
      assert(expected.nonEmpty)
      assert(got.sorted == expected.sorted, s"maps [$startMap, $endMap), reduce partitions [$start, $end)")
    }
  }

  test("empty reduce partitions, an empty map output and an empty shuffle read as nothing") {
    val partitioner = new EvenPartitioner
    val gen = recordsButMap1
    val shuffled = input(gen = gen).partitionBy(partitioner)
    val result = byPartition(shuffled)
    val all = (0 until NumMaps).flatMap(gen)
    assert(result == expectedByPartition(all, partitioner))
    assert(result(1).isEmpty && result(3).isEmpty && result(0).nonEmpty)
    // A reader over only the empty partitions, and one over only the empty map output.
    val handle = dependency(shuffled).shuffleHandle
    val sizes = sc.parallelize(Seq((0, NumMaps, 1, 2), (0, NumMaps, 3, 4), (1, 2, 0, 5)), 3).map {
      case (startMap, endMap, start, end) =>
        val context = TaskContext.get()
        SparkEnv.get.blockingShuffleManager.getReader[Int, Long](handle, startMap, endMap, start, end, context,
          context.taskMetrics().createTempShuffleReadMetrics()).read().size
    }.collect()
    assert(sizes.toSeq == Seq(0, 0, 0))
    // A shuffle with no records at all, aggregated.
    assert(sc.parallelize(Seq.empty[(Int, Long)], 3).reduceByKey(_ + _, 4).collect().isEmpty)
  }

  test("a record larger than the whole sort buffer round-trips among small ones") {
    val big = 3 << 20 // 3 MiB: larger than the 1 MiB sort buffer, ~100 segments
    val sizes = Seq(0 -> 10, 1 -> big, 2 -> 100, 3 -> (big / 2), 4 -> 1, 5 -> big, 6 -> 70000)
    val shuffled = sc.parallelize(sizes, 2).map { case (k, n) => (k, payload(k, n)) }.partitionBy(new HashPartitioner(2))
    val result = shuffled.map { case (k, a) => (k, a.length, java.util.Arrays.equals(a, payload(k, a.length))) }.collect()
    assert(result.sortBy(_._1).toSeq == sizes.map { case (k, n) => (k, n, true) })
  }
}

private object SluiceShuffleLocalSuite {

  val NumMaps = 4

  /** What map task `map` emits: deterministic, so the expected answers need no Spark. */
  def records(map: Int): Seq[(Int, Long)] =
    (0 until 3000).map(i => ((map * 7919 + i * 31) % 97, map * 100000L + i))

  /** [[records]], except that map task 1 emits nothing. */
  val recordsButMap1: Int => Seq[(Int, Long)] = m => if (m == 1) Seq.empty else records(m)

  /** `size` bytes that only `key` gives. */
  def payload(key: Int, size: Int): Array[Byte] = { val a = new Array[Byte](size); new Random(key).nextBytes(a); a }

  /** Five partitions, of which only 0, 2 and 4 get keys. */
  final class EvenPartitioner extends Partitioner {
    override def numPartitions: Int = 5
    override def getPartition(key: Any): Int = (key.asInstanceOf[Int] % 3) * 2
  }
}
