package io.sluice.netty

import java.util.concurrent.TimeUnit

import io.netty.channel.{ChannelHandlerContext, ChannelInboundHandlerAdapter}
import io.sluice.partition.{PartitionNotFoundException, PartitionReadScheduler, ResultPartitionManager, ResultPartitionType}

/**
 * Serves the requests of one connection (Flink's PartitionRequestServerHandler): a
 * PartitionRequest opens a reader on the requested subpartitions of a pipelined partition (or
 * leaves it waiting for a producer that has not registered yet, at most `requestTimeoutMs`); a
 * MultiPartitionRequest, and a PartitionRequest of a finished blocking partition, open one reader
 * over the finished partitions (packing their buffers into frames of at most `maxPayload` payload
 * bytes, the receivers' segment size, and `maxFrameLength` bytes in all, read on the
 * `readScheduler`'s threads, so no partition file is read on an event loop), AddCredit and
 * CancelPartitionRequest reach the reader (a request beyond the peer's reader limit is refused with
 * an ErrorResponse, see [[PeerLimits]], as is a request frame beyond the frame limit, an
 * [[OversizedFrame]]), CloseRequest releases them all, and a client's heartbeat
 * [[Ping]] is answered with a [[Pong]] at once (dropped while the connection is not writable: the
 * client then has data coming, which tells it as much). The writing of data is the
 * [[PartitionRequestQueue]]'s. The connection reads one application's partitions, `source` (a node
 * service first finds a request's map outputs in its producer executor's files). Confined to the
 * connection's event loop.
 */
private[netty] final class PartitionRequestServerHandler(
    source: PartitionSource,
    queue: PartitionRequestQueue,
    requestTimeoutMs: Long,
    counters: TransportCounters,
    maxPayload: Int,
    maxFrameLength: Int,
    readScheduler: PartitionReadScheduler) extends ChannelInboundHandlerAdapter {

  private val partitionManager: ResultPartitionManager = source.partitions

  override def channelRead(ctx: ChannelHandlerContext, msg: AnyRef): Unit = msg match {
    case r: PartitionRequest => onPartitionRequest(ctx, r)
    case r: MultiPartitionRequest => onMultiPartitionRequest(ctx, r)
    case AddCredit(id, credit) => queue.addCredit(id, credit)
    case CancelPartitionRequest(id) => queue.cancel(id)
    case o: OversizedFrame => queue.refuse(o.receiverId, new TransportProtocolException(s"${o.describe}; refused"))
    case Ping(seq) =>
      if (ctx.channel().isWritable) {
        counters.pongsSent.increment()
        ctx.writeAndFlush(Pong(seq))
      }
    case CloseRequest =>
      queue.releaseAll()
      ctx.close()
    case other => ctx.fireChannelRead(other)
  }

  private def onPartitionRequest(ctx: ChannelHandlerContext, r: PartitionRequest): Unit = {
    if (partitionManager.getPartition(r.partitionId).exists(_.partitionType == ResultPartitionType.Blocking)) {
      onMultiPartitionRequest(ctx,
        MultiPartitionRequest(r.receiverId, r.credit, r.creditBased,
          IndexedSeq(RequestedSubpartitions(r.partitionId, r.subpartitionStart, r.subpartitionEnd))))
      return
    }
    if (isDuplicate(ctx, r.receiverId)) return
    val reader = new CreditBasedSequenceNumberingViewReader(r.receiverId, r.partitionId, r.subpartitionStart,
      r.subpartitionEnd, r.credit, r.creditBased, queue)
    if (!queue.register(reader)) return // the peer holds its maximum of readers: refused
    try {
      if (!r.waitForProducer) {
        reader.requestSubpartitionView(partitionManager)
        queue.notifyReaderCreated(reader)
      } else if (!partitionManager.createSubpartitionViewOrWait(r.partitionId, reader)) {
        ctx.executor().schedule(
          new Runnable {
            override def run(): Unit = if (!reader.hasView && !reader.isReleased) {
              queue.failReader(reader, ErrorKind.PartitionNotFound, new PartitionNotFoundException(r.partitionId))
            }
          }, requestTimeoutMs, TimeUnit.MILLISECONDS)
      }
    } catch {
      case e: Throwable => queue.failReader(reader, PartitionRequestQueue.kindOf(e), e)
    }
  }

  private def onMultiPartitionRequest(ctx: ChannelHandlerContext, r: MultiPartitionRequest): Unit = {
    if (isDuplicate(ctx, r.receiverId)) return
    val reader = new CreditBasedUnionViewReader(r, maxPayload, maxFrameLength, queue, readScheduler)
    if (!queue.register(reader)) return
    try {
      source.prepare(r.producerExecutor, r.inputs)
      reader.open(partitionManager, r.inputs)
      queue.notifyReaderCreated(reader)
    } catch {
      case e: Throwable => queue.failReader(reader, PartitionRequestQueue.kindOf(e), e)
    }
  }

  /** A second request for a receiver that has a reader breaks the protocol: the connection fails. */
  private def isDuplicate(ctx: ChannelHandlerContext, id: InputChannelID): Boolean = {
    val duplicate = queue.hasReader(id)
    if (duplicate) {
      queue.fatal(new TransportProtocolException(s"${ctx.channel().remoteAddress()} requested a second partition " +
          s"for receiver $id"))
    }
    duplicate
  }
}
