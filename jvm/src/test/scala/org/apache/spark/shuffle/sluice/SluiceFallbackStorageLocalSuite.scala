package org.apache.spark.shuffle.sluice

import java.io.{File, RandomAccessFile}
import java.nio.file.Files
import java.util.concurrent.ConcurrentLinkedQueue

import scala.jdk.CollectionConverters._

import org.apache.spark.{
  FetchFailed, HashPartitioner, MapOutputTrackerMaster, ShuffleDependency, SparkConf, SparkContext, SparkEnv
}
import org.apache.spark.rdd.RDD
import org.apache.spark.scheduler.{SparkListener, SparkListenerTaskEnd}
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.storage.TestingSparkFallbackStorage
import org.apache.spark.util.LongAccumulator
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * Map outputs in Spark's decommissioning fallback storage on a real SparkContext (`local[2]`), as
 * Spark's BlockManagerDecommissioner puts them there: its own FallbackStorage.copy asks Sluice's
 * resolver, which copies the partition file and index to the fallback path and has the driver
 * point the MapStatus at the fallback storage. The executor's own files are then released, so
 * the reduce stage can only read the copies: it reads them exactly, without running a map task
 * again; a corrupt copy is a FetchFailed, after which Spark recomputes and the answer is still
 * exact; a dropped shuffle's copies go, and at the end the application's directory, although
 * spark.storage.decommission.fallbackStorage.cleanUp is left at its default (false).
 * Sluice's storage plugin is on, so a dropped shuffle also reaches the executor's shuffle manager.
 */
class SluiceFallbackStorageLocalSuite extends AnyFunSuite with BeforeAndAfterAll {
  import SluiceFallbackStorageLocalSuite._

  private var sc: SparkContext = _
  private var root: File = _
  private val fetchFailures = new ConcurrentLinkedQueue[FetchFailed]()

  override def beforeAll(): Unit = {
    super.beforeAll()
    root = Files.createTempDirectory("sluice-fallback-storage").toFile
    val conf = new SparkConf(false)
      .setMaster("local[2]")
      .setAppName(getClass.getSimpleName)
      .set("spark.shuffle.manager", classOf[SluiceShuffleManager].getName)
      .set("spark.shuffle.sort.io.plugin.class", classOf[SluiceShuffleDataIO].getName)
      .set("spark.driver.host", "127.0.0.1")
      .set("spark.driver.bindAddress", "127.0.0.1")
      .set("spark.ui.enabled", "false")
      .set("spark.decommission.enabled", "true")
      .set("spark.storage.decommission.enabled", "true")
      .set(SluiceFallbackStorage.PathKey, root.getAbsolutePath + "/") // Spark wants the separator
    sc = new SparkContext(conf)
    sc.addSparkListener(new SparkListener {
      override def onTaskEnd(end: SparkListenerTaskEnd): Unit = end.reason match {
        case f: FetchFailed => fetchFailures.add(f)
        case _ =>
      }
    })
  }

  override def afterAll(): Unit = {
    try {
      val appDir = new File(root, sc.applicationId)
      sc.stop()
      sc = null
      assert(!appDir.exists(), s"the application's fallback files outlived it: ${Option(appDir.list()).map(_.toSeq)}")
    } finally {
      Option(root.listFiles()).foreach(_.foreach(f => org.apache.spark.util.Utils.deleteRecursively(f)))
      root.delete()
      super.afterAll()
    }
  }

  private val expected: Map[Int, Long] = (0 until NumMaps).flatMap(records).groupMapReduce(_._1)(_._2)(_ + _)

  /** A shuffle of [[records]], its map stage run, and the accumulator its map tasks count their runs in. */
  private def shuffled(): (RDD[(Int, Long)], Int, LongAccumulator) = {
    val runs = sc.longAccumulator("map task runs")
    val rdd = sc.parallelize(0 until NumMaps, NumMaps).flatMap { m => runs.add(1); records(m) }
      .partitionBy(new HashPartitioner(Reducers))
    val dep = rdd.dependencies.head.asInstanceOf[ShuffleDependency[Int, Long, Long]]
    sc.submitMapStage(dep).get()
    assert(runs.value == NumMaps)
    (rdd, dep.shuffleId, runs)
  }

  private def statuses(shuffleId: Int) =
    SparkEnv.get.mapOutputTracker.asInstanceOf[MapOutputTrackerMaster].shuffleStatuses(shuffleId)
      .withMapStatuses(_.toSeq)

  /** Spark's decommissioner hands every map output of `shuffleId` to the fallback storage; the executor's own go. */
  private def moveToFallbackStorage(shuffleId: Int): Unit = {
    statuses(shuffleId).foreach(s => TestingSparkFallbackStorage.copy(shuffleId, s.mapId))
    assert(statuses(shuffleId).forall(_.location == SparkInternals.fallbackStorageLocation),
      statuses(shuffleId).map(_.location))
    SluiceEnvironment.ifStarted.foreach(_.releaseShuffle(shuffleId))
  }

  private def shuffleDir(shuffleId: Int): File = new File(root, s"${sc.applicationId}/$shuffleId")

  private def summed(rdd: RDD[(Int, Long)]): Map[Int, Long] = rdd.reduceByKey(_ + _).collect().toMap

  test("Spark's fallback copy of Sluice's map outputs is read back exactly, without running a map task again") {
    val (rdd, shuffleId, runs) = shuffled()
    moveToFallbackStorage(shuffleId)
    val copies = Option(shuffleDir(shuffleId).list()).map(_.toSeq).getOrElse(Nil)
    assert(copies.count(_.matches("sluice-\\d+\\.data")) == NumMaps, copies)
    assert(summed(rdd) == expected)
    assert(runs.value == NumMaps, "no map task ran again")
    assert(fetchFailures.isEmpty, fetchFailures)
  }

  test("a corrupt copy is a FetchFailed: Spark recomputes, and the answer is still exact") {
    fetchFailures.clear()
    val (rdd, shuffleId, runs) = shuffled()
    moveToFallbackStorage(shuffleId)
    val victim = statuses(shuffleId).head.mapId
    val data = new File(shuffleDir(shuffleId), s"sluice-$victim.data")
    new File(shuffleDir(shuffleId), s".sluice-$victim.data.crc").delete() // Hadoop's own checksum would find it first
    val raf = new RandomAccessFile(data, "rw")
    try { raf.seek(raf.length() / 3); val v = raf.read(); raf.seek(raf.length() / 3); raf.write(v ^ 0x40) }
    finally raf.close()
    assert(summed(rdd) == expected)
    sc.listenerBus.waitUntilEmpty()
    val failed = fetchFailures.asScala.toSeq
    assert(failed.exists(f => f.mapId == victim && f.shuffleId == shuffleId && f.message.contains("Checksum mismatch")),
      failed)
    // Every failure blames the fallback storage, but for a reduce task that asked for the map
    // outputs' locations after the first failure unregistered the victim's: Spark's own
    // MetadataFetchFailedException, a FetchFailed without an address (one CI run saw it).
    assert(failed.forall(f =>
        f.bmAddress == SparkInternals.fallbackStorageLocation ||
          (f.bmAddress == null && f.shuffleId == shuffleId)), failed.map(_.bmAddress))
    assert(runs.value > NumMaps, "Spark ran the lost map outputs again")
  }

  test("a dropped shuffle's copies go, and so do the executor's partitions (Sluice's storage plugin passes it on)") {
    val (_, shuffleId, _) = shuffled()
    val env = SluiceEnvironment.ifStarted.get
    assert(env.finishedBlockingPartitions.exists(_.shuffleId == shuffleId))
    moveToFallbackStorage(shuffleId)
    val (_, kept, _) = shuffled()
    assert(shuffleDir(shuffleId).isDirectory)
    sc.cleaner.get.doCleanupShuffle(shuffleId, blocking = true)
    assert(!shuffleDir(shuffleId).exists(), "the dropped shuffle's copies are deleted")
    assert(env.finishedBlockingPartitions.exists(_.shuffleId == kept))
    sc.cleaner.get.doCleanupShuffle(kept, blocking = true)
    assert(!env.finishedBlockingPartitions.exists(_.shuffleId == kept), "the executor released the dropped shuffle")
  }
}

private object SluiceFallbackStorageLocalSuite {
  val NumMaps = 4
  val Reducers = 5

  /** What map task `map` emits: deterministic, so the expected answer needs no Spark. */
  def records(map: Int): Seq[(Int, Long)] = (0 until 2000).map(i => ((map * 131 + i * 17) % 61, map * 10000L + i))
}
