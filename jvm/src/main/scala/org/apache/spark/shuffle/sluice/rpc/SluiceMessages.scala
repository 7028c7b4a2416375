package org.apache.spark.shuffle.sluice.rpc

import io.sluice.NodeServiceAddress
import io.sluice.metrics.{ExecutorSnapshot, SampleRequest, StageSampleResult}

/**
 * What Sluice's executor plugin and driver plugin say to each other over Spark's plugin RPC
 * (PluginContext.ask), encoded with [[ReportCodec]]. Executors report periodically; the driver
 * cannot call them, so its sampling requests and the peers' servers ride on the replies.
 */
private[sluice] object SluiceMessages {

  /** An executor's Sluice server: where readers of its map outputs connect. */
  final case class SluiceServer(executorId: String, host: String, port: Int)

  /**
   * An executor's periodic report: its metrics tick, the stack samples it finished since, its
   * Sluice server once started, and then the node shuffle service that serves its map outputs
   * (None: the executor serves them itself) and the dirs its map outputs are written into.
   */
  final case class Report(snapshot: ExecutorSnapshot, samples: Seq[StageSampleResult], server: Option[SluiceServer] = None,
      nodeService: Option[NodeServiceAddress] = None, partitionDirs: Seq[String] = Nil)

  /**
   * A server an executor's readers will read map outputs from: another executor's Sluice server,
   * or (`node`) a node shuffle service that serves other executors' outputs.
   */
  final case class ReadServer(host: String, port: Int, node: Boolean = false)

  /** Another executor on the reporting executor's host, and the dirs its map outputs are written into. */
  final case class ExecutorDirs(executorId: String, dirs: Seq[String])

  /**
   * The driver's answer: stages whose running tasks the executor should sample now, the servers
   * its readers will read from (see [[PeerServers]]), to which it may connect before its first
   * reader needs them, and, with spark.shuffle.readHostLocalDisk, the other executors on its host
   * whose map outputs its readers read from their files.
   */
  final case class ReportReply(requests: Seq[SampleRequest], servers: Seq[ReadServer] = Nil,
      hostLocal: Seq[ExecutorDirs] = Nil)
}
