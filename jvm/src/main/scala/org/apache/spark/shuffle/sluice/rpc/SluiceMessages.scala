package org.apache.spark.shuffle.sluice.rpc

import io.sluice.metrics.{ExecutorSnapshot, SampleRequest, StageSampleResult}

/**
 * What Sluice's executor plugin and driver plugin say to each other over Spark's plugin RPC
 * (PluginContext.ask), encoded with [[RpcPayload]]. Executors report periodically; the driver
 * cannot call them, so its sampling requests ride on the replies.
 */
private[sluice] object SluiceMessages {

  /** An executor's periodic report: its metrics tick and the stack samples it finished since. */
  final case class Report(snapshot: ExecutorSnapshot, samples: Seq[StageSampleResult])

  /** The driver's answer: stages whose running tasks the executor should sample now. */
  final case class ReportReply(requests: Seq[SampleRequest])
}
