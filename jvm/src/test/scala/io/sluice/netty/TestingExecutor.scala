package io.sluice.netty

import java.io.File
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import io.sluice.TestingThreads
import io.sluice.buffer.BlockCodec
import io.sluice.config.{SluiceConf, SluiceOptions}
import io.sluice.memory.NetworkBufferPool
import io.sluice.partition._
import io.sluice.partition.consumer.{GateInput, HostLocalPartitions, InputGateFactory, ProducerLocation, SingleInputGate}
import org.apache.spark.network.sasl.SecretKeyHolder
import org.apache.spark.network.util.{MapConfigProvider, TransportConf}
import org.apache.spark.shuffle.sluice.internal.{SparkInternals, TransportConfOverlay}
import org.apache.spark.unsafe.Platform

/**
 * One simulated executor for transport tests: its own NetworkBufferPool, ResultPartitionManager
 * and NettyConnectionManager on loopback, so several of them in one JVM talk over real TCP. Its
 * blocking partitions take the production path: written into its local dir's layout, then
 * finished and registered ([[finish]]) as the Spark layer's writer does, so readers get them from
 * the finished-partition table and the index cache. Small 4 KiB segments make tests move many
 * buffers quickly. (Many executors with production environments: the bench's SimulatedCluster.)
 */
final class TestingExecutor(
    val executorId: String,
    settings: Map[String, String] = Map.empty,
    transportSettings: Map[String, String] = Map.empty,
    auth: Option[(SecretKeyHolder, String)] = None,
    val numSegments: Int = 512,
    fileCipher: Option[PartitionedFileCipher] = None,
    sparkTransportConf: TransportConf = null,
    readHostLocal: Boolean = false) {

  val conf: SluiceConf = SluiceConf(TestingExecutor.DefaultSettings ++ settings)
  val networkBufferPool = new NetworkBufferPool(numSegments, conf.segmentSize)

  /** The local dir its blocking partitions are written into. */
  val spillDir: File = Files.createTempDirectory(s"sluice-$executorId").toFile
  // As ShuffleEnvironment builds it: finished partitions kept as table rows over this layout, the index cache.
  private val layout = new PartitionedFileLayout(IndexedSeq(spillDir))
  val partitionManager = new ResultPartitionManager(conf.get(SluiceOptions.MaxOpenPartitionFiles), Some(layout),
    conf.get(SluiceOptions.IndexCacheSize))

  /** `transportSettings` over the defaults, or a TransportConf made by Spark (sparkTransportConf). */
  val transportConf: TransportConf = TransportConfOverlay(
    if (sparkTransportConf != null) sparkTransportConf
    else new TransportConf("sluice", new MapConfigProvider((TestingExecutor.DefaultTransport ++ transportSettings).asJava)),
    conf)
  val connectionManager = new NettyConnectionManager(conf, transportConf, partitionManager, auth, "127.0.0.1",
    SparkInternals.TransportPipeline)
  val port: Int = connectionManager.start()
  val location: ProducerLocation = ProducerLocation(executorId, "127.0.0.1", port)

  /** With `readHostLocal`, the other executors' partitions its gates read from their files (see [[readsFilesOf]]). */
  val hostLocal: Option[HostLocalPartitions] = if (!readHostLocal) None
  else Some(new HostLocalPartitions(
      ResultPartitionManager.Caches(partitionManager.fileReaders, partitionManager.indexCache), _.host == "127.0.0.1"))
  val gateFactory = new InputGateFactory(conf, networkBufferPool, partitionManager, connectionManager, executorId,
    fileCipher, hostLocal = hostLocal)
  TestingExecutor.running.put(port, this)

  def counters: TransportCounters = connectionManager.counters

  /** The Netty channel of this executor's connection to `server` (it must hold one). */
  def clientChannelTo(server: TestingExecutor): io.netty.channel.Channel =
    connectionManager.clientFactory.connection("127.0.0.1", server.port).get.channel

  /**
   * A registered pipelined partition of `numSubpartitions` with a pool of `poolSize` buffers,
   * sending a CRC32C with each buffer unless `checksums` is off.
   */
  def pipelinedPartition(id: ResultPartitionID, numSubpartitions: Int, poolSize: Int = -1,
      checksums: Boolean = true): PipelinedResultPartition = {
    val size = if (poolSize > 0) poolSize else numSubpartitions + conf.get(SluiceOptions.FloatingBuffersPerGate)
    val pool = networkBufferPool.createBufferPool(math.min(numSubpartitions, size), size, s"partition $id")
    val p = new PipelinedResultPartition(id, numSubpartitions, pool, conf.get(SluiceOptions.MaxBuffersPerSubpartition),
      conf.get(SluiceOptions.RequestBufferTimeout), partitionManager.unregister, checksumsInTransit = checksums)
    partitionManager.registerResultPartition(p)
    p
  }

  /**
   * A blocking partition to be written by the test, in this executor's local dir (encrypted with
   * `fileCipher`, if any), made as ShuffleEnvironment makes one; readers see it once [[finish]]ed.
   */
  def blockingPartition(
      id: ResultPartitionID, numSubpartitions: Int, codec: Option[BlockCodec], poolSize: Int = 4): SortMergeResultPartition = {
    val pool = networkBufferPool.createBufferPool(1, poolSize, s"partition $id")
    val file = PartitionedFile.create(layout.writtenFile(id), numSubpartitions, codec, fileCipher, partitionManager.indexCache)
    new SortMergeResultPartition(id, numSubpartitions, pool, file, conf.get(SluiceOptions.RequestBufferTimeout))
  }

  /**
   * Finishes `p` and registers it, as the Spark layer's writer does when its map task succeeds: the
   * manager keeps it as a finished-partition table row, and readers get a partition rebuilt over its
   * file (see [[served]]).
   */
  def finish(p: SortMergeResultPartition): SortMergeResultPartition = {
    p.finish()
    partitionManager.registerResultPartition(p)
    p
  }

  /** The partition this executor serves for `id` (rebuilt from its table row unless readers hold it). */
  def served(id: ResultPartitionID): SortMergeResultPartition =
    partitionManager.getPartition(id).collect { case s: SortMergeResultPartition => s }
      .getOrElse(throw new AssertionError(s"$executorId serves no blocking partition $id"))

  /**
   * A gate over `inputs`, pipelined (one channel per input) when `waitForProducers` is set or any
   * input is a pipelined partition registered in a running TestingExecutor (found by its port, or
   * by its executor id when reached through a relay), as the Spark layer
   * decides by the shuffle's kind; otherwise one channel per producing executor.
   */
  def gate(owner: String, inputs: IndexedSeq[GateInput], codec: Option[BlockCodec] = None,
      waitForProducers: Boolean = false): SingleInputGate = {
    val pipelined = waitForProducers || inputs.exists { in =>
      val producer = Option(TestingExecutor.running.get(in.producer.port))
        .orElse(TestingExecutor.running.values().asScala.find(_.executorId == in.producer.executorId))
      producer.flatMap(_.partitionManager.getPartition(in.partitionId)).exists(_.partitionType == ResultPartitionType.Pipelined)
    }
    gateFactory.create(owner, inputs, codec, waitForProducers, pipelined)
  }

  /**
   * Waits until every segment is back in the NetworkBufferPool and nothing is required, and every
   * read buffer of the server is back; fails otherwise.
   */
  def awaitAllBuffersBack(timeoutMs: Long = 10000): Unit = {
    val deadline = System.currentTimeMillis() + timeoutMs
    val reads = connectionManager.server.readScheduler
    while (reads.numBuffersInUse != 0 && System.currentTimeMillis() < deadline) Thread.sleep(10)
    assert(reads.numBuffersInUse == 0, s"$executorId's server leaks read buffers: ${reads.numBuffersInUse} hold frames")
    while ((networkBufferPool.numberOfAvailableSegments != numSegments || networkBufferPool.numberOfRequiredSegments != 0) &&
      System.currentTimeMillis() < deadline) Thread.sleep(10)
    assert(networkBufferPool.numberOfAvailableSegments == numSegments && networkBufferPool.numberOfRequiredSegments == 0,
      s"$executorId leaks network buffers: ${networkBufferPool.numberOfAvailableSegments} of $numSegments available, " +
        s"${networkBufferPool.numberOfRequiredSegments} still required, pools ${networkBufferPool.numberOfPools}")
  }

  /** The flow-control invariants of this executor's transport. */
  def assertNoCreditViolations(): Unit = {
    assert(counters.negativeCredits.sum == 0, s"$executorId: a server reader's credit went negative: $counters")
    assert(counters.creditOverruns.sum == 0, s"$executorId: a channel received data beyond its credit: $counters")
  }

  /** Its gates read `other`'s finished partitions from their files, as if both ran on one host (needs readHostLocal). */
  def readsFilesOf(other: TestingExecutor): Unit = hostLocal.get.addExecutor(other.executorId, Seq(other.spillDir))

  def shutdown(): Unit = {
    TestingExecutor.running.remove(port, this)
    connectionManager.shutdown()
    hostLocal.foreach(_.shutdown())
    partitionManager.shutdown()
    Option(spillDir.listFiles()).foreach(_.foreach(_.delete()))
    spillDir.delete()
  }
}

object TestingExecutor {

  /** The executors running in this JVM, by server port (how [[gate]] tells a pipelined input). */
  private val running = new java.util.concurrent.ConcurrentHashMap[Int, TestingExecutor]()

  val DefaultSettings: Map[String, String] = Map(
    SluiceOptions.SegmentSize.key -> "4k",
    SluiceOptions.MaxFrameLength.key -> "64k",
    SluiceOptions.RequestTimeout.key -> "20s",
    SluiceOptions.ConnectTimeout.key -> "10s",
    SluiceOptions.RequestBufferTimeout.key -> "20s")

  val DefaultTransport: Map[String, String] = Map(
    "spark.sluice.io.serverThreads" -> "2",
    "spark.sluice.io.clientThreads" -> "2",
    "spark.sluice.io.mode" -> "NIO")

  private val threads = java.util.concurrent.Executors.newCachedThreadPool { r =>
    val t = new Thread(r, "sluice-test-task"); t.setDaemon(true); t
  }

  /** Runs `body` on another thread (a producer or consumer task). */
  def async[T](body: => T): java.util.concurrent.CompletableFuture[T] =
    java.util.concurrent.CompletableFuture.supplyAsync(() => body, threads)

  /** The result of `f`, waiting at most `timeoutMs`; rethrows what the task threw. */
  def await[T](f: java.util.concurrent.CompletableFuture[T], timeoutMs: Long = 30000): T =
    try f.get(timeoutMs, java.util.concurrent.TimeUnit.MILLISECONDS)
    catch { case e: java.util.concurrent.ExecutionException => throw e.getCause }

  /**
   * Runs `body` with two executors, A and B, on `settings`; afterwards A's server must have
   * released every reader (ended, failed or cancelled), and once every partition is released every
   * buffer of both is back, with no credit violated.
   */
  def withReaderAndProducer(settings: Map[String, String] = Map.empty)(
      body: (TestingExecutor, TestingExecutor) => Unit): Unit = {
    val a = new TestingExecutor("A", settings)
    val b = new TestingExecutor("B", settings)
    withExecutors(a, b) {
      body(a, b)
      TestingThreads.eventually(what = "A's server released every reader")(a.counters.activeReaders.get == 0)
      for (e <- Seq(a, b); id <- e.partitionManager.partitionIds) e.partitionManager.releasePartition(id, null)
      a.assertNoCreditViolations(); b.assertNoCreditViolations()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  /** Runs `body` with executors that are shut down afterwards, even when it fails. */
  def withExecutors[T](executors: TestingExecutor*)(body: => T): T =
    try body
    finally executors.foreach(e =>
        try e.shutdown()
        catch { case _: Throwable => () })
}

/** Deterministic test records: who wrote them, where, which one, and a checkable body. */
object TestingRecords {

  def record(producer: Long, subpartition: Int, seq: Int, size: Int): Array[Byte] = {
    require(size >= 16)
    val b = java.nio.ByteBuffer.allocate(size)
    b.putLong(producer).putInt(subpartition).putInt(seq)
    var i = 16
    while (i < size) { b.put(i, (producer * 31 + subpartition * 17 + seq * 7 + i).toByte); i += 1 }
    b.array()
  }

  /** Checks a record read back and returns (producer, subpartition, seq). */
  def check(bytes: Array[Byte]): (Long, Int, Int) = {
    val b = java.nio.ByteBuffer.wrap(bytes)
    val producer = b.getLong(0); val sub = b.getInt(8); val seq = b.getInt(12)
    var i = 16
    while (i < bytes.length) {
      assert(bytes(i) == (producer * 31 + sub * 17 + seq * 7 + i).toByte,
        s"record $seq of producer $producer subpartition $sub is corrupt at byte $i")
      i += 1
    }
    (producer, sub, seq)
  }

  def write(p: ResultPartition, subpartition: Int, rec: Array[Byte]): Unit =
    p.emitRecord(subpartition, rec, Platform.BYTE_ARRAY_OFFSET, rec.length)

  /** Writes `count` records of `size` bytes to `subpartition`, then nothing else. */
  def writeMany(p: ResultPartition, subpartition: Int, count: Int, size: Int): Unit = {
    var i = 0
    while (i < count) { write(p, subpartition, record(p.partitionId.producerId, subpartition, i, size)); i += 1 }
  }
}
