package org.apache.spark.shuffle.sluice.bench

import io.sluice.NettyLeakDetection
import io.sluice.TestingClusters.withSimulatedCluster
import io.sluice.config.{SluiceConf, SluiceOptions}
import io.sluice.netty.PartitionRequestClientFactory
import io.sluice.partition.PartitionReadScheduler
import org.scalatest.funsuite.AnyFunSuite

/**
 * The engine at a cluster's width: executors in one JVM, each a production ShuffleEnvironment,
 * map outputs written, finished and registered as the Spark layer's writer does, read by reducers
 * over the network and locally. What one executor holds must not grow with the number of
 * executors; index reads must stay proportional to what the readers need.
 */
class SimulatedClusterSuite extends AnyFunSuite with NettyLeakDetection {

  private val Executors = 64

  test(s"$Executors executors: prepared connections to every executor read from, bounded threads and descriptors") {
    assume(ProcessResources.isSupported, "needs Linux's /proc")
    withSimulatedCluster(Executors) { cluster =>
      val prepared = cluster.prepareConnections()
      assert(prepared == Executors * (Executors - 1), "every executor prepared a connection to each of its peers")
      cluster.runShuffle(maps = 2 * Executors, reducers = Executors, recordsPerBlock = 2, recordSize = 32)
      val m = cluster.measure()
      val conf = cluster.conf
      for (e <- m.executors) {
        val where = s"executor ${e.id}: $e"
        assert(e.maps == 2 && e.reducers == 1 && e.records == 2L * 2 * Executors, where)
        // Every executor a reducer read from already had a connection from the reducer's executor.
        assert(e.readFrom == Executors - 1 && e.readFromPrepared == e.readFrom, where)
        assert(e.clientConnections == Executors - 1 && e.connectionsOpened == Executors - 1,
          s"one connection per peer, opened once: $where")
        // One descriptor per connection and the listening socket; the rest does not grow with the cluster.
        assert(e.fdListening == 1 && e.fdAccepted == e.serverConnections && e.fdClient == e.clientConnections, where)
        assert(e.fdFiles <= 2 * e.maps + 2 * 2, s"its files' data and index handles at most: $where")
        assert(e.threads <= maxThreadsPerExecutor(conf), where)
        assert(e.peakGateSegments > 0 && e.peakGateSegments <= gateBound(conf, Executors - 1), where)
        assert(e.indexBytesNeeded > 0 && e.indexReadRatio <= 1.2, where)
      }
      assert(m.otherDescriptorsPerExecutor <= MaxOtherDescriptorsPerExecutor,
        s"selectors and pipes per executor: ${m.otherDescriptorsPerExecutor}")
    }
  }

  test("executors holding 1,800 map outputs each keep no descriptor per output, and none once readers are idle") {
    assume(ProcessResources.isSupported, "needs Linux's /proc")
    withSimulatedCluster(2) { cluster =>
      // 30 shuffles of 120 maps, all kept: 3,600 map outputs, two files each (data and index).
      (1 to 30).foreach(_ => cluster.runShuffle(maps = 120, reducers = 7, recordsPerBlock = 1, recordSize = 16))
      val read = cluster.measure()
      assert(read.executors.forall(_.maps == 1800) && read.executors.map(_.reducers).sum == 7 * 30, read)
      // The server keeps files open between readers, and closes those no reader asked for during
      // PartitionedFileReaderCache.IdleMs.
      val deadline = System.nanoTime() + 60L * 1000000000L
      var idle = cluster.measure()
      while (idle.executors.exists(_.fdFiles > 0) && System.nanoTime() < deadline) {
        Thread.sleep(500)
        idle = cluster.measure()
      }
      assert(idle.executors.forall(_.fdFiles == 0), s"partition files open while no reader reads: $idle")
      assert(idle.otherDescriptorsPerExecutor <= MaxOtherDescriptorsPerExecutor, idle)
    }
  }

  for (cache <- Seq("0", "64k", "256k", "4m")) {
    test(s"index bytes read stay within 1.2 x what readers need with a $cache index cache (200 maps x 100 reducers)") {
      // Each executor keeps 100 map outputs of 100 reduce partitions: ~2.4 KB of index each. A 64k
      // cache admits them but holds about 26, which the 4 reducers of each executor read at once:
      // a reader missing any other must not read its whole index for its 28 bytes.
      withSimulatedCluster(2, slots = 4, settings = Map(SluiceOptions.IndexCacheSize.key -> cache)) { cluster =>
        cluster.runShuffle(maps = 200, reducers = 100, recordsPerBlock = 1, recordSize = 16)
        val m = cluster.measure()
        assert(m.indexBytesNeeded >= 200L * 100 * 28, s"every reducer's range of every output: $m")
        assert(m.indexReadRatio <= 1.2, s"index bytes read ${m.indexBytesRead} for ${m.indexBytesNeeded} needed: $m")
        if (cache == "0") assert(m.indexBytesRead == m.indexBytesNeeded, "no cache: every reader reads its range alone")
        if (cache == "4m") assert(m.indexBytesRead == 0, "every index left in the cache by its writer: nothing read")
      }
    }
  }

  // The wide extremes of real jobs, at the engine's level: 4,000 map outputs into each reducer's
  // gate, and 4,000 subpartitions in each map output. `sluice bench scale` runs them (and 1500 x
  // 400, 6000 x 400, 4000 x 1000) through Spark against the sort shuffle; tests/test_many_executors.py
  // runs 1500 x 400 through Spark on 12 executors.
  for ((maps, reducers) <- Seq((4000, 200), (200, 4000))) {
    test(s"$maps maps x $reducers reducers on 2 executors: every record once, gates and index reads bounded") {
      withSimulatedCluster(2, slots = 2) { cluster =>
        cluster.runShuffle(maps = maps, reducers = reducers, recordsPerBlock = 1, recordSize = 16)
        val m = cluster.measure()
        val conf = cluster.conf
        for (e <- m.executors) {
          val where = s"executor ${e.id}: $e"
          assert(e.maps == maps / 2 && e.reducers == reducers / 2 && e.records == maps.toLong * reducers / 2, where)
          assert(e.peakGateSegments > 0 && e.peakGateSegments <= gateBound(conf, 1), where)
          assert(e.fdFiles <= 2 * e.maps, where)
        }
        assert(m.indexReadRatio <= 1.2, s"index bytes read ${m.indexBytesRead} for ${m.indexBytesNeeded} needed: $m")
      }
    }
  }

  /**
   * The most threads one executor runs (its task threads aside): its connector threads, its
   * server's accepting and serving event loops, its client's, its read threads and output flusher,
   * and a few the JVM starts once for all (Netty's global executor, ...) that the executor which
   * happened to start them counts. None of it depends on the number of executors.
   */
  private def maxThreadsPerExecutor(conf: SluiceConf): Int =
    PartitionRequestClientFactory.ConnectThreads + 1 + conf.get(SluiceOptions.ServerThreads) +
      conf.get(SluiceOptions.ClientThreads) + PartitionReadScheduler.threads(conf.get(SluiceOptions.ReadThreads)) + 1 + 4

  /** Descriptors per executor that are neither sockets nor files: each event loop's selector and its wake-up descriptor. */
  private val MaxOtherDescriptorsPerExecutor = 16.0

  /**
   * The most network buffers one gate may hold while reading from `remote` executors: its scratch
   * buffers, the exclusive buffers of the channels in flight and its floating pool. This bound
   * still grows with the executors read from (up to maxChannelsInFlightPerGate); once a gate's
   * memory is a constant, whatever the executor count, it becomes that constant.
   */
  private def gateBound(conf: SluiceConf, remote: Int): Long = {
    val perChannel = conf.get(SluiceOptions.BuffersPerChannel)
    val floating = math.max(conf.get(SluiceOptions.FloatingBuffersPerGate), conf.get(SluiceOptions.MaxCreditWindow) - perChannel)
    2L + perChannel.toLong * math.min(remote, conf.get(SluiceOptions.MaxChannelsInFlightPerGate)) + floating
  }
}
