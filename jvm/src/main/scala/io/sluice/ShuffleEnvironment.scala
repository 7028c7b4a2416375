package io.sluice

import java.io.File
import java.util.concurrent.atomic.AtomicInteger

import io.sluice.buffer.BlockCodec
import io.sluice.config.{SluiceConf, SluiceOptions}
import io.sluice.memory.NetworkBufferPool
import io.sluice.metrics.ShuffleMetricRegistry
import io.sluice.netty.{NettyConnectionManager, PortRange, SparkPipelineNames}
import io.sluice.partition._
import io.sluice.partition.consumer._
import io.sluice.writer.OutputFlusher
import org.apache.spark.network.sasl.SecretKeyHolder
import org.apache.spark.network.util.{MapConfigProvider, TransportConf}

/**
 * Everything one executor needs to produce and consume shuffle data (Flink's
 * NettyShuffleEnvironment): the NetworkBufferPool, the ResultPartitionManager, the output
 * flusher, the connection manager (the executor's Sluice server and its one connection per
 * remote executor), the factory of input gates, and the executor's network metrics. Created once
 * per executor JVM, on first use, by the Spark layer; of Spark it uses network-common only (a
 * TransportConf and the application's secret, handed in by the Spark layer).
 * Thread-safe.
 *
 * @param localDirs where blocking partitions write their files (Spark's local dirs)
 * @param codec      makes a fresh per-buffer codec (spark.shuffle.compress), or None
 * @param transport  the transport's Spark settings, credentials and bind address
 * @param fileCipher encrypts blocking partition files and decrypts what is read of them (Spark's
 *                   I/O encryption, spark.io.encryption.enabled), or None. Pipelined partitions
 *                   never touch the disk and are not concerned.
 * @param nodeService the node shuffle service this executor registered `localDirs` with, which
 *                   serves its blocking partitions to remote readers (its own server serves its
 *                   pipelined ones), and keeps them when the executor goes; None: the executor
 *                   serves them, and deletes them when it stops
 * @param fallbackStorage Spark's decommissioning fallback storage
 *                   (spark.storage.decommission.fallbackStorage.path), which readers read the map
 *                   outputs of decommissioned executors from when no peer took them; None when unset
 * @param readHostLocal whether gates read the finished map outputs of other executors on this host
 *                   from their files once [[addHostLocalExecutor]] names their dirs (Spark's
 *                   spark.shuffle.readHostLocalDisk), rather than from their servers
 */
final class ShuffleEnvironment(
    val conf: SluiceConf,
    val executorId: String,
    localDirs: Seq[File],
    val codec: Option[() => BlockCodec],
    transport: TransportSettings,
    val fileCipher: Option[PartitionedFileCipher] = None,
    val nodeService: Option[NodeServiceAddress] = None,
    fallbackStorage: Option[FallbackStorage] = None,
    readHostLocal: Boolean = false) {

  require(localDirs.nonEmpty, "Sluice needs at least one local dir for blocking partitions")

  val networkBufferPool = new NetworkBufferPool(conf.numberOfPoolSegments, conf.segmentSize,
    conf.get(SluiceOptions.RequestBufferTimeout))
  private val layout = new PartitionedFileLayout(localDirs.toIndexedSeq)
  val partitionManager = new ResultPartitionManager(conf.get(SluiceOptions.MaxOpenPartitionFiles), Some(layout),
    conf.get(SluiceOptions.IndexCacheSize))
  val outputFlusher = new OutputFlusher(s"sluice-output-flusher-$executorId")
  // Closes the partition files the server kept open once no reader came for them for a while.
  outputFlusher.every(PartitionedFileReaderCache.IdleMs / 2)(() => partitionManager.fileReaders.closeIdle())

  /** The executor's network metrics: one group per task attempt, executor totals, memory segments. */
  val metrics = new ShuffleMetricRegistry(executorId, networkBufferPool)
  val connectionManager = new NettyConnectionManager(conf, transport.transportConf, partitionManager, transport.auth,
    transport.bindHost, transport.sparkPipeline, transport.portMaxRetries, transport.appId)

  /** The port of this executor's Sluice server (advertised in pipelined producers' locations, and in MapStatus without a node service). */
  val serverPort: Int =
    try connectionManager.start()
    catch {
      case e: Throwable => outputFlusher.shutdown(); throw e
    }
  metrics.setExecutorCounters(() =>
    Seq(io.sluice.metrics.MetricNames.IndexBytesRead -> partitionManager.indexCache.indexBytesRead,
      io.sluice.metrics.MetricNames.IndexBytesNeeded -> partitionManager.indexCache.indexBytesNeeded))
  metrics.setTransportProbe(() =>
    io.sluice.metrics.TransportSnapshot(serverPort,
      connectionManager.numServerConnections, connectionManager.numClientConnections, serverReads,
      connectionManager.counters.connectionsOpened.sum()))

  /** The server's reads of partition files now (metrics). */
  private def serverReads: io.sluice.metrics.ServerReadSnapshot =
    connectionManager.server.readSnapshot(partitionManager.fileReaders.numDescriptors)
  private val hostLocal =
    if (!readHostLocal) None
    else Some(new HostLocalPartitions(ResultPartitionManager.Caches(partitionManager.fileReaders, partitionManager.indexCache),
        p => if (p.node) nodeService.exists(_.host == p.host) else p.host == connectionManager.host))
  private val gateFactory = new InputGateFactory(conf, networkBufferPool, partitionManager, connectionManager, executorId,
    fileCipher, fallbackStorage, hostLocal)
  private val fileCounter = new AtomicInteger
  @volatile private var stopped = false

  private def buffersPerChannel = conf.get(SluiceOptions.BuffersPerChannel)
  private def floatingPerGate = conf.get(SluiceOptions.FloatingBuffersPerGate)
  private def bufferRequestTimeout = conf.get(SluiceOptions.RequestBufferTimeout)

  /**
   * A blocking partition for one map output, written sort-merge into its file in the local dirs
   * ([[PartitionedFileLayout]]). Its sort buffer needs a single buffer to make progress (it spills)
   * and takes its fair share of the executor's pool up to spark.sluice.memory.sortBufferSize,
   * whatever the number of reduce partitions (Flink's sort-shuffle, FLIP-148).
   */
  def createBlockingPartition(id: ResultPartitionID, numSubpartitions: Int): SortMergeResultPartition = {
    checkRunning()
    val max = math.max(1L, conf.get(SluiceOptions.SortBufferSize) / conf.segmentSize).min(Int.MaxValue).toInt
    val pool = networkBufferPool.createBufferPool(1, max, s"blocking result partition ($id)")
    try {
      val file = PartitionedFile.create(layout.writtenFile(id), numSubpartitions, codec.map(_.apply()), fileCipher,
        partitionManager.indexCache)
      new SortMergeResultPartition(id, numSubpartitions, pool, file, bufferRequestTimeout)
    } catch {
      case e: Throwable => pool.lazyDestroy(); throw e
    }
  }

  /**
   * A pipelined partition: every subpartition needs a buffer being written plus one to hand over,
   * as in Flink (numSubpartitions + 1 required).
   */
  def createPipelinedPartition(id: ResultPartitionID, numSubpartitions: Int): PipelinedResultPartition = {
    checkRunning()
    val max = math.max(numSubpartitions + 1L, numSubpartitions.toLong * buffersPerChannel + floatingPerGate)
      .min(Int.MaxValue).toInt
    val pool = networkBufferPool.createBufferPool(numSubpartitions + 1, max, s"pipelined result partition ($id)")
    new PipelinedResultPartition(id, numSubpartitions, pool, conf.get(SluiceOptions.MaxBuffersPerSubpartition),
      bufferRequestTimeout, p => partitionManager.unregister(p), conf.get(SluiceOptions.BufferTimeout),
      conf.get(SluiceOptions.IdleFlushInterval), Some(outputFlusher), transport.checksumsInTransit)
  }

  /**
   * A new file (not created yet) in one of the local dirs, for a record a reduce task gathers on
   * disk because it spans buffers beyond spark.sluice.memory.recordSpillThreshold ([[SpilledRecord]]).
   */
  def recordSpillFile(): File = {
    val dir = localDirs(java.util.concurrent.ThreadLocalRandom.current().nextInt(localDirs.size))
    new File(dir, s"sluice-record-${java.util.UUID.randomUUID()}.spill")
  }

  /** Makes a partition visible to readers (blocking: once finished; pipelined: at once). */
  def registerPartition(p: ResultPartition): Unit = partitionManager.registerResultPartition(p)

  /**
   * An input gate over `inputs`, with the partitions requested: a local channel for each input
   * produced in this executor, a remote one over the shared connection for the others.
   * `waitForProducers` lets channels wait for pipelined producers that have not started yet.
   */
  def createInputGate(owner: String, inputs: IndexedSeq[GateInput], waitForProducers: Boolean): SingleInputGate = {
    checkRunning()
    gateFactory.create(owner, inputs, codec.map(_.apply()), waitForProducers, pipelined = waitForProducers)
  }

  // ---- moving finished blocking partitions between executors (Spark's decommissioning) --------

  /** The finished, unreleased blocking partitions of this executor: what can move elsewhere. */
  def finishedBlockingPartitions: Seq[ResultPartitionID] = partitionManager.finishedBlockingPartitions

  /** Bytes of the files of [[finishedBlockingPartitions]]. */
  def finishedBlockingPartitionBytes: Long = partitionManager.finishedBlockingBytes

  /**
   * A finished blocking partition's file and index, to move it to another executor
   * ([[adoptBlockingPartition]] there); None when it is not registered here (any more). Pipelined
   * partitions are never exported: they are consumed while written and leave nothing behind.
   */
  def exportBlockingPartition(id: ResultPartitionID): Option[PartitionExport] =
    partitionManager.getPartition(id) match {
      case Some(p: SortMergeResultPartition) if p.isFinished && !p.isReleased =>
        try {
          val length = p.file.path.length()
          Some(PartitionExport(p.file.path, length, PartitionedFileIndex.encode(p, length)))
        } catch {
          case _: java.io.IOException => None // released meanwhile
        }
      case _ => None
    }

  /** A new file in one of the local dirs to receive the file of partition `id` from another executor. */
  def newMigratedPartitionFile(id: ResultPartitionID): File = {
    checkRunning()
    layout.migratedFile(id, fileCounter.getAndIncrement() & PartitionedFileLayout.MaxMigrated)
  }

  /**
   * Registers partition `id`, finished on another executor, whose file was received into `file`
   * (from [[newMigratedPartitionFile]]) and whose index is `index` (its executor's
   * [[exportBlockingPartition]]): readers find it here from now on, and it is released, and its
   * file deleted, with its shuffle like any other. Returns false, deleting `file`, when this
   * executor already holds the partition (it was moved here before); fails, deleting `file`,
   * when the index does not describe the file.
   */
  def adoptBlockingPartition(id: ResultPartitionID, file: File, index: Array[Byte]): Boolean = {
    var registered = false
    var partitionFile: PartitionedFile = null
    try {
      checkRunning()
      if (partitionManager.isBlocking(id)) false
      else {
        partitionFile = PartitionedFile.adopt(id, file, index, partitionManager.indexCache)
        val pool = networkBufferPool.createBufferPool(0, 1, s"migrated blocking result partition ($id)")
        val partition = SortMergeResultPartition.adopt(id, partitionFile, pool)
        if (partitionManager.registerIfAbsent(partition).isDefined) {
          partition.release(null) // moved here twice at once: the other copy is registered
          false
        } else {
          registered = true
          true
        }
      }
    } finally if (!registered) {
        if (partitionFile != null) partitionFile.delete() // the index file beside it too
        else file.delete()
      }
  }

  /** Releases every partition of a shuffle (Spark unregistered it). */
  def releaseShuffle(shuffleId: Int): Int = {
    hostLocal.foreach(_.releaseShuffle(shuffleId))
    partitionManager.releasePartitionsOfShuffle(shuffleId)
  }

  /** The dirs this executor's blocking partitions are written into: what other executors on its host read them from. */
  def partitionDirs: Seq[File] = layout.localDirs

  /**
   * Executor `executorId`, on this host, writes its blocking partitions into `dirs`: with
   * readHostLocal, gates read its finished map outputs from their files from now on.
   */
  def addHostLocalExecutor(executorId: String, dirs: Seq[File]): Unit =
    if (executorId != this.executorId) hostLocal.foreach(_.addExecutor(executorId, dirs))

  /**
   * How a gate that meets a new producer served on this host learns its dirs at once (the Spark
   * layer: a report to the driver, whose answer calls [[addHostLocalExecutor]]).
   */
  def setHostLocalRefresh(refresh: () => Unit): Unit = hostLocal.foreach(_.setRefresh(refresh))

  def isStopped: Boolean = stopped

  private def checkRunning(): Unit = if (stopped) throw new IllegalStateException("Sluice's shuffle environment is stopped")

  def shutdown(): Unit = synchronized {
    if (!stopped) {
      stopped = true
      outputFlusher.shutdown()
      connectionManager.shutdown()
      hostLocal.foreach(_.shutdown())
      partitionManager.shutdown(keepFinishedFiles = nodeService.isDefined)
      networkBufferPool.destroy()
    }
  }
}

/** Where a node shuffle service listens: readers of the map outputs it serves connect there. */
final case class NodeServiceAddress(host: String, port: Int)

/** A finished blocking partition on its way to another executor: its file and its encoded [[PartitionedFileIndex]]. */
final case class PartitionExport(file: File, length: Long, index: Array[Byte])

/**
 * How an executor's transport is set up: Spark's TransportConf for module "sluice" (I/O mode,
 * TLS, crypto), the shared secret and application id when spark.authenticate is on, the address
 * the server binds and advertises, and the names of the handlers Spark's TransportContext puts in
 * a pipeline (which the Spark boundary knows and the engine does not), spark.port.maxRetries
 * (how many ports above spark.sluice.network.port the server tries), whether pipelined
 * partitions' buffers cross the network with a CRC32C (spark.shuffle.streaming.checksum.enabled),
 * and the application id every connection names (a server serves only its own application's readers).
 */
final case class TransportSettings(transportConf: TransportConf, auth: Option[(SecretKeyHolder, String)], bindHost: String,
    sparkPipeline: SparkPipelineNames, portMaxRetries: Int = PortRange.DefaultMaxRetries,
    checksumsInTransit: Boolean = true, appId: Option[String] = None)

object TransportSettings {

  /** No authentication, Spark's defaults, loopback: engine tests and benchmarks. */
  def plain(sparkPipeline: SparkPipelineNames, bindHost: String = "127.0.0.1"): TransportSettings =
    TransportSettings(new TransportConf("sluice", new MapConfigProvider(java.util.Collections.emptyMap())), None, bindHost,
      sparkPipeline)
}
