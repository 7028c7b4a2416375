package org.apache.spark.shuffle.sluice.bench

import java.io.File
import java.net.InetSocketAddress
import java.nio.file.Files
import java.util.concurrent.{Executors, TimeUnit}

import scala.collection.mutable.ArrayBuffer

import io.sluice.TransportSettings
import io.sluice.config.{SluiceConf, SluiceOptions}
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.GateInput
import org.apache.spark.network.util.{MapConfigProvider, TransportConf}
import org.apache.spark.shuffle.sluice.internal.{SparkInternals, TransportConfOverlay}
import org.apache.spark.shuffle.sluice.rpc.PeerServers
import org.apache.spark.shuffle.sluice.rpc.SluiceMessages.SluiceServer

/**
 * N executors in one JVM, each a production [[io.sluice.ShuffleEnvironment]] with its own network
 * memory, partition manager, Sluice server on loopback, local dir and threads
 * ([[SimulatedExecutor]]): the engine at a cluster's width without a cluster. The driver's part is
 * played here: [[prepareConnections]] names each executor its peers as the driver's [[PeerServers]]
 * does and the executor prepares connections as Sluice's executor plugin does; [[runShuffle]]
 * places map tasks and reduce tasks and hands each reducer its inputs as Spark's MapOutputTracker
 * would (grouped by executor). [[measure]] reads per executor what grows with the cluster, and
 * [[shutdown]] releases everything and reports any buffer or thread that did not come back.
 * Methods are called by one driving thread.
 */
final class SimulatedCluster private (val executors: IndexedSeq[SimulatedExecutor], root: File, val conf: SluiceConf,
    baselineHeap: Long, baselineOtherDescriptors: Int) {

  def size: Int = executors.size

  private var nextShuffle = 0

  /**
   * Names each executor up to `maxPeers` peers' servers as the driver does (each reports twice, so
   * every server is known by the second answer) and prepares those connections on the executor's
   * own thread, as its plugin does; waits until they are open. Returns the connections prepared.
   */
  def prepareConnections(maxPeers: Int = PeerServers.MaxPeers, timeoutMs: Long = SimulatedCluster.WaitMs): Int = {
    val directory = new PeerServers(maxPeers)
    val live = executors.map(_.id).toSet
    def server(e: SimulatedExecutor) = SluiceServer(e.id, e.location.host, e.location.port)
    executors.foreach(e => directory.announce(Some(server(e)), None, e.id, live))
    val named = executors.map(e => e -> directory.announce(Some(server(e)), None, e.id, live))
    named.map { case (e, peers) =>
      e.run(peers.foreach(p => e.env.connectionManager.prepareConnection(p.host, p.port, p.node)))
    }
      .foreach(_.get(timeoutMs, TimeUnit.MILLISECONDS))
    val wanted = named.flatMap { case (e, peers) => peers.take(SimulatedCluster.preparedBound).map(p => (e, p)) }
    val deadline = System.nanoTime() + timeoutMs * 1000000L
    def open = wanted.count { case (e, p) => e.env.connectionManager.clientFactory.connection(p.host, p.port).exists(_.isActive) }
    while (open < wanted.size && System.nanoTime() < deadline) Thread.sleep(20)
    open
  }

  /**
   * One shuffle of `maps` map tasks (map m on executor m mod N) into `reducers` reduce tasks (reducer
   * r on `reduceExecutors(r mod K)`, all executors when empty), each map writing `recordsPerBlock`
   * records of `recordSize` bytes per reducer, then every reducer's records checked. Returns how long
   * each stage took.
   */
  def runShuffle(maps: Int, reducers: Int, recordsPerBlock: Int, recordSize: Int,
      reduceExecutors: IndexedSeq[Int] = IndexedSeq.empty): SimulatedCluster.ShuffleTimes = {
    require(recordSize >= 16, s"records of $recordSize bytes: at least 16 (map, reducer, sequence)")
    nextShuffle += 1
    val shuffleId = nextShuffle
    val mapStart = System.nanoTime()
    val mapOf = (0 until maps).map(m => executors(m % size))
    val sizes = (0 until maps).map(m =>
      mapOf(m).run(mapOf(m).runMap(shuffleId, m.toLong, reducers, recordsPerBlock,
          recordSize))).map(_.get(SimulatedCluster.WaitMs, TimeUnit.MILLISECONDS))
    val reduceStart = System.nanoTime()
    val readers = if (reduceExecutors.isEmpty) executors.indices else reduceExecutors
    // As the MapOutputTracker groups them: by executor, only map outputs with data for the reducer.
    val byExecutor = (0 until maps).groupBy(_ % size).toSeq.sortBy(_._1).map(_._2)
    val reading = (0 until reducers).map { r =>
      val inputs = byExecutor.flatMap(ms =>
        ms.filter(m => sizes(m)(r) > 0).map(m =>
          GateInput(ResultPartitionID(shuffleId, m.toLong), r, r + 1, mapOf(m).location))).toIndexedSeq
      val e = executors(readers(r % readers.size))
      r -> e.run(e.runReduce(shuffleId, r, inputs))
    }
    reading.foreach { case (r, f) =>
      val counts = f.get(SimulatedCluster.WaitMs, TimeUnit.MILLISECONDS)
      val wrong = (0 until maps).filter(m => counts.getOrElse(m.toLong, 0) != recordsPerBlock)
      if (wrong.nonEmpty) {
        throw new IllegalStateException(s"reducer $r read ${wrong.take(5).map(m => counts.getOrElse(m.toLong, 0))} " +
          s"records of maps ${wrong.take(5)}, not $recordsPerBlock each")
      }
    }
    SimulatedCluster.ShuffleTimes(shuffleId, (reduceStart - mapStart) / 1e9, (System.nanoTime() - reduceStart) / 1e9)
  }

  /** Releases a shuffle's map outputs on every executor. */
  def releaseShuffle(shuffleId: Int): Unit = executors.foreach(_.env.releaseShuffle(shuffleId))

  /** What each executor holds and has seen now, and the JVM's heap and descriptors shared out over the executors. */
  def measure(): SimulatedCluster.Measurement = {
    val sockets = if (ProcessResources.isSupported) ProcessResources.tcpSockets() else Map.empty[Long, ProcessResources.TcpSocket]
    val targets = if (ProcessResources.isSupported) ProcessResources.descriptors() else Nil
    val socketPorts = targets.flatMap(ProcessResources.socketInode).flatMap(sockets.get)
    val perExecutor = executors.map { e =>
      // Its client's sockets, by (local port, server port): a local port alone may serve other connections too.
      val own = executors.filter(_ ne e).flatMap(p =>
        e.env.connectionManager.clientFactory.connection(p.location.host, p.location.port).flatMap(c =>
          Option(c.localAddress).collect { case a: InetSocketAddress => (a.getPort, p.location.port) })).toSet
      val dir = e.dir.getCanonicalPath + File.separator
      val cache = e.env.partitionManager.indexCache
      val t = e.taskFigures
      SimulatedCluster.ExecutorFigures(e.id, t.maps, t.reducers, t.records, cache.size, t.peakGateSegments,
        t.peakGateSegments * conf.segmentSize, cache.indexBytesRead, cache.indexBytesNeeded,
        e.env.connectionManager.numClientConnections, e.env.connectionManager.numServerConnections,
        e.env.connectionManager.counters.connectionsOpened.sum(), t.readFrom, t.readFromPrepared,
        targets.count(_.startsWith(dir)),
        socketPorts.count(s => s.localPort == e.env.serverPort && s.listening),
        socketPorts.count(s => s.localPort == e.env.serverPort && !s.listening),
        socketPorts.count(s => own.contains((s.localPort, s.remotePort))),
        e.threads.size)
    }
    val other = targets.count(t => ProcessResources.socketInode(t).isEmpty && !t.startsWith(root.getPath)) -
      baselineOtherDescriptors
    SimulatedCluster.Measurement(perExecutor, (ProcessResources.retainedHeapBytes() - baselineHeap) / size,
      math.max(0, other).toDouble / size)
  }

  /**
   * Releases every partition, waits until every executor's network memory is whole again (every
   * buffer back, no pool left, nothing required), shuts every executor down, waits for their
   * threads to end and deletes their dirs. Returns what did not come back, one line each.
   */
  def shutdown(timeoutMs: Long = SimulatedCluster.WaitMs): Seq[String] = {
    val problems = ArrayBuffer.empty[String]
    executors.foreach(e => e.env.partitionManager.partitionIds.foreach(e.env.partitionManager.releasePartition(_, null)))
    val deadline = System.nanoTime() + timeoutMs * 1000000L
    def whole(e: SimulatedExecutor) = {
      val p = e.env.networkBufferPool
      p.numberOfAvailableSegments == p.totalSegments && p.numberOfPools == 0 && p.numberOfRequiredSegments == 0
    }
    while (!executors.forall(whole) && System.nanoTime() < deadline) Thread.sleep(20)
    executors.filterNot(whole).foreach { e =>
      problems += s"${e.id} leaks network buffers: ${e.env.networkBufferPool}"
    }
    val stopping = Executors.newFixedThreadPool(8)
    try executors.map(e => stopping.submit(new Runnable { override def run(): Unit = e.shutdown() })).foreach(f =>
        try f.get(timeoutMs, TimeUnit.MILLISECONDS)
        catch { case t: Throwable => problems += s"an executor did not shut down: $t" })
    finally stopping.shutdownNow()
    while (executors.exists(_.threads.exists(t => !SimulatedCluster.jvmWide(t))) && System.nanoTime() < deadline) {
      Thread.sleep(50)
    }
    executors.foreach { e =>
      val left = e.threads.filterNot(SimulatedCluster.jvmWide)
      if (left.nonEmpty) problems += s"${e.id} left threads running: ${left.map(_.getName).mkString(", ")}"
    }
    SimulatedCluster.delete(root)
    problems.toSeq
  }
}

object SimulatedCluster {

  /** How long any stage, start or shutdown may take before the simulation gives up (a loaded machine). */
  val WaitMs = 600000L

  /** What a simulated executor's environment needs on top of Sluice's defaults (`settings` go over these). */
  val DefaultSettings: Map[String, String] = Map(
    SluiceOptions.SegmentSize.key -> "4k",
    SluiceOptions.NetworkMemory.key -> "4m",
    SluiceOptions.SortBufferSize.key -> "256k",
    SluiceOptions.ServerThreads.key -> "1",
    SluiceOptions.ClientThreads.key -> "1",
    // Every simulated executor is on 127.0.0.1: one host as far as the per-host limits go.
    SluiceOptions.MaxConnectionsPerPeer.key -> "65536",
    SluiceOptions.RequestTimeout.key -> "120s",
    SluiceOptions.RequestBufferTimeout.key -> "120s",
    SluiceOptions.ConnectTimeout.key -> "60s")

  /** The connections an executor prepares at most (its client factory's bound). */
  private def preparedBound: Int = io.sluice.netty.PartitionRequestClientFactory.MaxPreparedConnections

  /** Threads the JVM starts once for everyone, whichever executor happened to start them first. */
  private def jvmWide(t: Thread): Boolean =
    t.getName.startsWith("globalEventExecutor") || t.getName.contains("ObjectCleaner")

  /**
   * Starts `n` executors (`slots` task threads each) on `settings` over [[DefaultSettings]], each
   * with a local dir of its own under a new temp dir.
   */
  def start(n: Int, slots: Int = 2, settings: Map[String, String] = Map.empty): SimulatedCluster = {
    require(n >= 1 && slots >= 1, s"$n executors of $slots slots")
    val conf = SluiceConf((DefaultSettings ++ settings).toSeq)
    val transportConf = TransportConfOverlay(new TransportConf("sluice",
        new MapConfigProvider(java.util.Collections.emptyMap())), conf)
    val transport = TransportSettings(transportConf, None, "127.0.0.1", SparkInternals.TransportPipeline)
    val root = Files.createTempDirectory("sluice-simulated-cluster").toFile
    val baselineHeap = ProcessResources.retainedHeapBytes()
    val baselineOther = if (ProcessResources.isSupported) {
      ProcessResources.descriptors().count(t => ProcessResources.socketInode(t).isEmpty && !t.startsWith(root.getPath))
    } else 0
    val started = ArrayBuffer.empty[SimulatedExecutor]
    try {
      (0 until n).foreach { i =>
        val dir = new File(root, s"executor-$i")
        dir.mkdirs()
        started += SimulatedExecutor.start(s"e$i", dir, slots, conf, transport)
      }
      new SimulatedCluster(started.toIndexedSeq, root, conf, baselineHeap, baselineOther)
    } catch {
      case e: Throwable =>
        started.foreach(x =>
          try x.shutdown()
          catch { case _: Throwable => () })
        delete(root)
        throw e
    }
  }

  private def delete(f: File): Unit = {
    Option(f.listFiles()).foreach(_.foreach(delete))
    f.delete()
  }

  /** How long a shuffle's map and reduce stages took. */
  final case class ShuffleTimes(shuffleId: Int, mapSeconds: Double, reduceSeconds: Double)

  /**
   * One executor's figures: tasks run and records read, the bytes its index cache holds, its gates'
   * peak network buffers (segments and bytes, the most one gate held at once), index bytes read and
   * needed, connections held to other servers, accepted by its server and opened so far, executors
   * its reducers read from (per reducer) and of those the ones it had a connection to when the
   * reducer started, open descriptors on its files and of its sockets (listening, accepted by its
   * server, opened by its client), and live threads (its task threads not counted).
   */
  final case class ExecutorFigures(id: String, maps: Int, reducers: Int, records: Long, indexCacheBytes: Long,
      peakGateSegments: Long, peakGateBytes: Long, indexBytesRead: Long, indexBytesNeeded: Long, clientConnections: Int,
      serverConnections: Int, connectionsOpened: Long, readFrom: Long, readFromPrepared: Long, fdFiles: Int,
      fdListening: Int, fdAccepted: Int, fdClient: Int, threads: Int) {

    /** Its sockets: listening, accepted by its server, opened by its client. */
    def fdSockets: Int = fdListening + fdAccepted + fdClient

    def indexReadRatio: Double = if (indexBytesNeeded == 0) 0.0 else indexBytesRead.toDouble / indexBytesNeeded
  }

  /**
   * Every executor's figures, and what the JVM shows only as a whole, shared out: heap retained
   * per executor (after a collection, over the JVM's heap before the cluster started) and
   * descriptors that are neither sockets nor files per executor (event loops' selectors, pipes).
   */
  final case class Measurement(executors: IndexedSeq[ExecutorFigures], heapRetainedPerExecutor: Long,
      otherDescriptorsPerExecutor: Double) {

    def indexBytesRead: Long = executors.map(_.indexBytesRead).sum
    def indexBytesNeeded: Long = executors.map(_.indexBytesNeeded).sum
    def indexReadRatio: Double = if (indexBytesNeeded == 0) 0.0 else indexBytesRead.toDouble / indexBytesNeeded
  }
}
