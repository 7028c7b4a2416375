package io.sluice.netty

import java.util.concurrent.{ConcurrentHashMap, RejectedExecutionException}

import io.netty.channel.{ChannelFuture, ChannelFutureListener, ChannelHandlerContext, ChannelInboundHandlerAdapter}
import io.sluice.partition.{PartitionNotFoundException, ProducerFailedException}
import io.sluice.partition.consumer.RemoteInputChannel

/**
 * The client's end of one connection (Flink's CreditBasedPartitionRequestClientHandler): it maps
 * receiver ids to the [[RemoteInputChannel]]s of every gate of the executor that read from this
 * remote executor, hands them what the decoder produced (buffers, their ends, errors), and
 * announces credit: channels with credit not yet announced queue up, and the event loop writes
 * one AddCredit at a time while the connection is writable.
 *
 * When the connection fails or closes, every channel on it fails with an exception naming the
 * remote executor and the channel's partition. An [[ErrorResponse]] whose kind says the data is
 * intact (the server failed for a reason of its own, or refused) fails its channel with a
 * [[ServerFailureException]], which fails the task without blaming the producer.
 *
 * The channel map is concurrent (channels register from task threads); everything else belongs
 * to the event loop.
 */
private[netty] final class CreditBasedPartitionRequestClientHandler(
    val remoteAddress: String,
    counters: TransportCounters) extends ChannelInboundHandlerAdapter with ReceiverLookup {

  import CreditBasedPartitionRequestClientHandler._

  private val channels = new ConcurrentHashMap[InputChannelID, RemoteInputChannel]()

  /** Receivers released recently; data still in flight for them is dropped. */
  private val released = new java.util.LinkedHashMap[InputChannelID, java.lang.Boolean](16, 0.75f, false) {
    override def removeEldestEntry(e: java.util.Map.Entry[InputChannelID, java.lang.Boolean]): Boolean =
      size() > MaxRememberedReleases
  }
  private val channelsWithCredit = new java.util.ArrayDeque[RemoteInputChannel]()

  /** Channels that became non-empty during the current read; their gates are told at its end. */
  private val channelsToNotify = new java.util.ArrayDeque[RemoteInputChannel]()
  private var notifyScheduled = false
  private val notifyTask: Runnable = () => { notifyScheduled = false; notifyGates() }
  private var ctx: ChannelHandlerContext = _
  private var writeInFlight = false
  @volatile private var failure: Throwable = _

  private val writeListener = new ChannelFutureListener {
    override def operationComplete(f: ChannelFuture): Unit = {
      writeInFlight = false
      if (f.isSuccess) writeNextCredit()
      else failAll(f.cause())
    }
  }

  override def handlerAdded(ctx: ChannelHandlerContext): Unit = this.ctx = ctx

  // ---- channel registry (any thread) ----------------------------------------------------------

  /** Registers a channel before its request goes out; fails it at once if the connection is gone. */
  def addInputChannel(channel: RemoteInputChannel): Unit = {
    channels.put(channel.id, channel)
    val f = failure
    if (f != null && channels.remove(channel.id) != null) channel.onConnectionError(f)
  }

  /**
   * Forgets a channel, remembering it as released first: the event loop, which looks the receiver
   * up without this lock and asks [[wasReleased]] when it is gone, then always finds it in one or the other
   * (late data dropped, not a protocol error).
   */
  def removeInputChannel(channel: RemoteInputChannel): Unit = released.synchronized {
    if (channels.containsKey(channel.id)) {
      released.put(channel.id, java.lang.Boolean.TRUE)
      channels.remove(channel.id)
    }
  }

  override def channelFor(id: InputChannelID): RemoteInputChannel = channels.get(id)

  override def wasReleased(id: InputChannelID): Boolean = released.synchronized(released.containsKey(id))

  def numChannels: Int = channels.size

  /** The channel has credit to announce (any thread): queue it on the event loop. */
  def notifyCreditAvailable(channel: RemoteInputChannel): Unit = {
    val loop = ctx.executor()
    val task: Runnable = () =>
      if (!channel.isReleased && failure == null) {
        channelsWithCredit.add(channel)
        writeNextCredit()
      }
    if (loop.inEventLoop()) task.run()
    else
      try loop.execute(task)
      catch { case _: RejectedExecutionException => () }
  }

  private def writeNextCredit(): Unit = {
    while (!writeInFlight && ctx.channel().isWritable && failure == null) {
      val channel = channelsWithCredit.poll()
      if (channel == null) return
      val credit = channel.getAndResetUnannouncedCredit()
      if (credit > 0 && !channel.isReleased) {
        counters.creditAnnounced.add(credit.toLong)
        counters.addCreditMessages.increment()
        writeInFlight = true
        ctx.writeAndFlush(AddCredit(channel.id, credit)).addListener(writeListener)
      }
    }
  }

  override def channelWritabilityChanged(ctx: ChannelHandlerContext): Unit = {
    writeNextCredit()
    ctx.fireChannelWritabilityChanged()
  }

  // ---- what the server sends (event loop) ------------------------------------------------------

  override def channelRead(ctx: ChannelHandlerContext, msg: AnyRef): Unit = msg match {
    case r: BufferResponse =>
      val channel = if (r.data == null) null else channels.get(r.receiverId)
      if (channel == null) r.releasePayload() // its channel was released: dropped
      else if (channel.receiveBuffer(r)) deferGateNotification(channel)
    case r: PackedBufferResponse =>
      val channel = if (r.data == null) null else channels.get(r.receiverId)
      if (channel == null) r.releasePayload()
      else if (channel.receivePacked(r)) deferGateNotification(channel)
    case e: EndOfPartition =>
      val channel = receiver(e.receiverId, "EndOfPartition")
      if (channel != null) channel.onEndOfPartition(e.sequenceNumber, e.subpartition)
    case e: ErrorResponse => onError(e)
    case o: OversizedFrame => onOversized(o)
    case _: Pong => counters.pongsReceived.increment() // its bytes already told the heartbeat the peer lives
    case other => ctx.fireChannelRead(other)
  }

  /**
   * The gate of `channel` learns about its data at the end of the current read (the buffers one
   * wake-up of the event loop brought), so that a consumer waiting for several channels, or for
   * several buffers of one, is woken once, not once per buffer. Netty signals the end of a read
   * with channelReadComplete; buffers decoded outside a read (a credit-less connection resuming
   * after a stall) are covered by a task that runs after the event loop's current round of I/O.
   */
  private def deferGateNotification(channel: RemoteInputChannel): Unit = {
    channelsToNotify.add(channel)
    if (!notifyScheduled) {
      notifyScheduled = true
      try ctx.executor().execute(notifyTask)
      catch { case _: RejectedExecutionException => notifyScheduled = false; notifyGates() } // shutting down
    }
  }

  private def notifyGates(): Unit = {
    var channel = channelsToNotify.poll()
    while (channel != null) {
      channel.notifyGate()
      channel = channelsToNotify.poll()
    }
  }

  override def channelReadComplete(ctx: ChannelHandlerContext): Unit = {
    notifyGates()
    ctx.fireChannelReadComplete()
  }

  private def receiver(id: InputChannelID, what: String): RemoteInputChannel = {
    val channel = channels.get(id)
    if (channel == null && !wasReleased(id)) {
      throw new TransportProtocolException(s"$what for unknown receiver $id from $remoteAddress")
    }
    channel
  }

  private def onError(e: ErrorResponse): Unit = e.receiverId match {
    case None =>
      val what = s"${e.kind}: ${e.causeClass}: ${e.message}"
      failAll(
        if (e.kind.lostData) new RemoteTransportException(s"The Sluice server at $remoteAddress closed the connection: $what")
        else new ServerFailureException(e.kind, remoteAddress, "every channel of the connection", what))
      ctx.close()
    case Some(id) =>
      val channel = receiver(id, "ErrorResponse")
      if (channel != null) {
        val remote =
          new RemoteTransportException(s"${e.causeClass}: ${e.message} (reported by the Sluice server at $remoteAddress)")
        if (e.input >= channel.inputs.size) {
          channel.onError(new TransportProtocolException(s"$remoteAddress reported a failure of input ${e.input} to " +
              s"${channel.description}, which requested ${channel.inputs.size}: ${remote.getMessage}"))
        } else {
          val input = if (e.input >= 0) channel.inputs(e.input) else channel.inputs.head
          channel.onError(
            e.kind match {
              case ErrorKind.PartitionNotFound => new PartitionNotFoundException(input.partitionId, cause = remote)
              case ErrorKind.ProducerFailed => new ProducerFailedException(input.partitionId, remote, e.input)
              case k if !k.lostData => new ServerFailureException(k, remoteAddress, channel.description, remote.getMessage)
              case _ => remote
            }, if (e.input >= 0) input.index else -1)
        }
      }
  }

  /** A data frame longer than spark.sluice.network.maxFrameLength was skipped: its channel fails, nothing else. */
  private def onOversized(o: OversizedFrame): Unit = {
    val channel = receiver(o.receiverId, o.messageName)
    if (channel != null) channel.onError(new TransportProtocolException(o.describe))
  }

  // ---- failures ----------------------------------------------------------------------------------

  override def channelInactive(ctx: ChannelHandlerContext): Unit = {
    failAll(new RemoteTransportException(s"The connection to $remoteAddress was closed"))
    ctx.fireChannelInactive()
  }

  override def exceptionCaught(ctx: ChannelHandlerContext, cause: Throwable): Unit = {
    failAll(cause)
    ctx.close()
  }

  /** Fails every channel of the connection; later registrations fail at once. */
  private def failAll(cause: Throwable): Unit = {
    if (failure == null) failure = cause
    channelsWithCredit.clear()
    val it = channels.values().iterator()
    while (it.hasNext) {
      val channel = it.next()
      it.remove()
      channel.onConnectionError(failure)
    }
  }
}

private[netty] object CreditBasedPartitionRequestClientHandler {

  /** How many released receiver ids a connection remembers to drop their late data quietly. */
  val MaxRememberedReleases = 16384
}
