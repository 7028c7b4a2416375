package org.apache.spark.shuffle.sluice

import java.io.File

import org.apache.spark.{MapOutputTracker, SparkConf, SparkEnv, TaskContext}
import org.apache.spark.network.netty.SparkTransportConf
import org.apache.spark.network.util.TransportConf
import org.apache.spark.scheduler.MapStatus
import org.apache.spark.serializer.Serializer
import org.apache.spark.shuffle.FetchFailedException
import org.apache.spark.storage.{BlockId, BlockManagerId}

/**
 * The one place Sluice touches Spark's private (`private[spark]`) APIs. Everything else in
 * Sluice uses public APIs only, so when Spark's internals move, this file is where to look.
 */
private[sluice] object SparkInternals {

  def env: SparkEnv = {
    val e = SparkEnv.get
    if (e == null) throw new IllegalStateException("Sluice needs a running SparkEnv (no SparkContext or executor here)")
    e
  }

  def conf: SparkConf = env.conf

  def executorId: String = env.executorId

  /** This executor's BlockManagerId: its real executor id and host, as Spark's recovery expects. */
  def blockManagerId: BlockManagerId = env.blockManager.blockManagerId

  /**
   * The location Sluice reports in MapStatus: this executor's real BlockManagerId with the Sluice
   * server's port in its topology info (`sluice:<port>`), the way spark-rapids advertises its
   * transport, so readers find the server while executor-loss handling still keys on the real
   * executor id and host.
   */
  def mapOutputLocation(sluicePort: Int): BlockManagerId = {
    val bm = blockManagerId
    BlockManagerId(bm.executorId, bm.host, bm.port, Some(SluiceLocation.encode(sluicePort, bm.topologyInfo)))
  }

  def mapStatus(location: BlockManagerId, sizes: Array[Long], mapId: Long, checksum: Long): MapStatus =
    MapStatus(location, sizes, mapId, checksum)

  def mapOutputTracker: MapOutputTracker = env.mapOutputTracker

  /** (location, [(block, size, mapIndex)]) of the map outputs a reader needs. */
  def mapSizesByExecutorId(shuffleId: Int, startMapIndex: Int, endMapIndex: Int, startPartition: Int,
      endPartition: Int): Iterator[(BlockManagerId, collection.Seq[(BlockId, Long, Int)])] =
    mapOutputTracker.getMapSizesByExecutorId(shuffleId, startMapIndex, endMapIndex, startPartition, endPartition)

  /**
   * A FetchFailedException for one map output. Must be called on the task thread: its constructor
   * marks the TaskContext as fetch-failed, which makes Spark recompute the map output.
   */
  def fetchFailed(location: BlockManagerId, shuffleId: Int, mapId: Long, mapIndex: Int, reduceId: Int,
      message: String, cause: Throwable): Exception =
    new FetchFailedException(location, shuffleId, mapId, mapIndex, reduceId, message, cause)

  /** Folds the read metrics of a finished read into the task's (Stages tab, SQL tab, REST). */
  def mergeShuffleReadMetrics(context: TaskContext): Unit = context.taskMetrics().mergeShuffleReadMetrics()

  def localDirs: Seq[File] = env.blockManager.diskBlockManager.localDirs.toSeq

  /** The TransportConf for Sluice's server and clients, with Spark's RPC SSL options. */
  def transportConf(conf: SparkConf, numCores: Int): TransportConf =
    SparkTransportConf.fromSparkConf(conf, "sluice", numCores, None, Some(env.securityManager.getRpcSSLOptions()))

  def rpcEnv: org.apache.spark.rpc.RpcEnv = env.rpcEnv

  def driverEndpointRef(name: String, conf: SparkConf, rpcEnv: org.apache.spark.rpc.RpcEnv): org.apache.spark.rpc.RpcEndpointRef =
    org.apache.spark.util.RpcUtils.makeDriverRef(name, conf, rpcEnv)

  def isAuthenticationEnabled: Boolean = env.securityManager.isAuthenticationEnabled()

  def secretKeyHolder: org.apache.spark.network.sasl.SecretKeyHolder = env.securityManager

  /**
   * The cluster features [[SparkFeatureCheck]] refuses, read through Spark's own config entries
   * so that unset keys take Spark's defaults (shuffle tracking and shuffle-block migration are on
   * by default), and dynamic allocation counted the way Spark counts it (never in local mode).
   */
  def clusterFeatures(conf: SparkConf): SparkFeatureCheck.Features = {
    import org.apache.spark.internal.config
    SparkFeatureCheck.Features(
      shuffleService = conf.get(config.SHUFFLE_SERVICE_ENABLED),
      pushBasedShuffle = conf.get(config.PUSH_BASED_SHUFFLE_ENABLED),
      dynamicAllocation = org.apache.spark.util.Utils.isDynamicAllocationEnabled(conf),
      shuffleTracking = conf.get(config.DYN_ALLOCATION_SHUFFLE_TRACKING_ENABLED),
      decommission = conf.get(config.DECOMMISSION_ENABLED),
      storageDecommission = conf.get(config.STORAGE_DECOMMISSION_ENABLED),
      shuffleBlockMigration = conf.get(config.STORAGE_DECOMMISSION_SHUFFLE_BLOCKS_ENABLED))
  }

  /** The column count of SQL's UnsafeRowSerializer (a private field), for reading rows back. */
  def unsafeRowFieldCount(serializer: Serializer): Option[Int] =
    if (serializer.getClass.getName != "org.apache.spark.sql.execution.UnsafeRowSerializer") None
    else {
      val f = serializer.getClass.getDeclaredField("numFields")
      f.setAccessible(true)
      Some(f.getInt(serializer))
    }
}

/** How the Sluice port travels in a BlockManagerId's topology info: `sluice:<port>[;<original>]`. */
private[sluice] object SluiceLocation {
  private val Prefix = "sluice:"

  def encode(port: Int, original: Option[String]): String = Prefix + port + original.fold("")(";" + _)

  def port(location: BlockManagerId): Int = location.topologyInfo match {
    case Some(t) if t.startsWith(Prefix) => t.drop(Prefix.length).takeWhile(_ != ';').toInt
    case other => throw new IllegalStateException(s"Map output at $location carries no Sluice port " +
      s"(topology info $other): was it written by another shuffle manager?")
  }
}
