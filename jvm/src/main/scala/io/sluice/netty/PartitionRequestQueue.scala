package io.sluice.netty

import java.io.IOException
import java.util.concurrent.RejectedExecutionException

import io.netty.buffer.ByteBufAllocator
import io.netty.channel.{ChannelFuture, ChannelFutureListener, ChannelHandlerContext, ChannelInboundHandlerAdapter}
import io.sluice.partition.{PartitionNotFoundException, ProducerFailedException, ResultPartitionManager}
import org.slf4j.LoggerFactory

/**
 * The server's writer for one connection (Flink's PartitionRequestQueue): it keeps every reader of
 * the connection, a queue of readers that can send now, and writes one message at a time: the
 * next one goes out when the previous write completed and the channel is writable. A reader can
 * send when its view has a buffer and it has credit (or is credit-less), or has its end or its
 * failure to report; after each buffer it goes to the back of the queue, so the readers of a
 * connection take turns. Error responses go first.
 *
 * A failure while serving one reader fails that reader only (an ErrorResponse for its receiver,
 * of the kind [[PartitionRequestQueue.kindOf]] gives it, the reader removed and its view released)
 * and the others go on: its view throwing, its partition released, its stored payload unreadable
 * by its read thread ([[UnreadablePayloadException]]; nothing of the frame went out). Only a write that failed for the connection itself (a broken
 * socket) or a protocol violation closes the connection.
 *
 * Confined to the connection's event loop; other threads only hand readers over
 * ([[notifyReaderNonEmpty]], [[notifyReaderCreated]], [[notifyReaderFailed]]).
 */
private[netty] final class PartitionRequestQueue(
    partitionManager: ResultPartitionManager,
    counters: TransportCounters,
    peer: PeerLimits.Peer = PeerLimits.Unlimited) extends ChannelInboundHandlerAdapter {

  import PartitionRequestQueue._

  private var ctx: ChannelHandlerContext = _
  private val readers = new java.util.HashMap[InputChannelID, NetworkSequenceViewReader]()
  private val available = new java.util.ArrayDeque[NetworkSequenceViewReader]()
  private val errors = new java.util.ArrayDeque[ErrorResponse]()
  private var writeInFlight = false
  private var closed = false

  private val writeListener = new ChannelFutureListener {
    override def operationComplete(f: ChannelFuture): Unit = {
      writeInFlight = false
      if (f.isSuccess) writeNextMessageIfPossible()
      else fatal(new IOException(s"Writing to ${f.channel().remoteAddress()} failed", f.cause()))
    }
  }

  override def handlerAdded(ctx: ChannelHandlerContext): Unit = this.ctx = ctx

  // ---- from the server handler (event loop) ---------------------------------------------------

  def hasReader(id: InputChannelID): Boolean = readers.containsKey(id)

  def numReaders: Int = readers.size

  /**
   * Keeps `reader` unless its peer already holds spark.sluice.network.maxReadersPerPeer readers:
   * then its receiver gets an ErrorResponse naming the host and the key, and nothing is kept.
   */
  def register(reader: NetworkSequenceViewReader): Boolean = {
    if (!peer.tryAddReader()) {
      counters.readersRefused.increment()
      sendError(ErrorResponse(reader.receiverId, ErrorKind.Refused, new PeerLimitException(peer.readerLimitMessage)))
      false
    } else {
      readers.put(reader.receiverId, reader)
      counters.activeReaders.incrementAndGet()
      true
    }
  }

  def addCredit(id: InputChannelID, credit: Int): Unit = {
    val reader = readers.get(id)
    // A reader already gone (its end was sent, or it failed) may still get credit in flight.
    if (reader != null) {
      reader.addCredit(credit)
      enqueue(reader)
    }
  }

  def cancel(id: InputChannelID): Unit = {
    val reader = readers.get(id)
    if (reader != null) {
      remove(reader)
      if (reader.registeredAsAvailable) { available.remove(reader); reader.registeredAsAvailable = false }
    }
  }

  /** Fails one request: its reader goes, the receiver gets an ErrorResponse. */
  def failReader(reader: NetworkSequenceViewReader, kind: ErrorKind, cause: Throwable): Unit = {
    if (readers.get(reader.receiverId) eq reader) {
      if (kind == ErrorKind.ServerError) {
        log.warn(s"Could not serve ${reader.describe} to ${ctx.channel().remoteAddress()}; its reader fails: $cause",
          cause)
      }
      remove(reader)
      if (reader.registeredAsAvailable) { available.remove(reader); reader.registeredAsAvailable = false }
      sendError(ErrorResponse(reader.receiverId, kind, cause))
    }
  }

  /** Refuses a request that got no reader (its frame was too long): an ErrorResponse for its receiver. */
  def refuse(receiverId: InputChannelID, cause: Throwable): Unit = sendError(ErrorResponse(receiverId, ErrorKind.Other, cause))

  private def sendError(e: ErrorResponse): Unit = {
    if (closed) return
    if (errors.size >= MaxPendingErrors) {
      fatal(new TransportProtocolException(s"${ctx.channel().remoteAddress()} does not read its " +
          s"error responses ($MaxPendingErrors pending)"))
    } else {
      errors.add(e)
      writeNextMessageIfPossible()
    }
  }

  // ---- from any thread --------------------------------------------------------------------------

  /**
   * The reader's view has data (producer or flusher thread, or the event loop itself while a view
   * is being read or released): queue it on the event loop, always later, never from inside the
   * view call that notified.
   */
  def notifyReaderNonEmpty(reader: NetworkSequenceViewReader): Unit =
    if (reader.notificationPending.compareAndSet(false, true)) {
      later { reader.notificationPending.set(false); enqueue(reader) }
    }

  /** The view of a request was opened (on the loop, or on the producer's thread when it waited). */
  def notifyReaderCreated(reader: NetworkSequenceViewReader): Unit = later(enqueue(reader))

  def notifyReaderFailed(reader: NetworkSequenceViewReader, cause: Throwable): Unit =
    later(failReader(reader, kindOf(cause), cause))

  private def later(task: => Unit): Unit = runOnLoop(() => task)

  /** Runs `task` on the connection's event loop, later; false when the loop is shutting down. */
  def runOnLoop(task: Runnable): Boolean =
    try { ctx.executor().execute(task); true }
    catch { case _: RejectedExecutionException => false }

  /** The connection's buffer allocator (pooled), for frames read off the event loop. */
  def alloc: ByteBufAllocator = ctx.alloc()

  /** A reader has something to send now (on the event loop only). */
  def notifyReaderAvailable(reader: NetworkSequenceViewReader): Unit = enqueue(reader)

  // ---- writing -----------------------------------------------------------------------------------

  private def enqueue(reader: NetworkSequenceViewReader): Unit = {
    if (closed || reader.registeredAsAvailable || !(readers.get(reader.receiverId) eq reader)) return
    if (reader.isAvailable) {
      available.add(reader)
      reader.registeredAsAvailable = true
      writeNextMessageIfPossible()
    }
  }

  /**
   * Writes what can go now: error responses first, then buffers of available readers in turn, up
   * to [[MaxBytesPerFlush]] per flush (one system call for several buffers instead of one each),
   * and flushes once. The next batch starts when the flush completed and the channel is writable.
   * A reader that fails meanwhile ends the batch, so that its error goes next. `writeInFlight` is
   * set for the whole batch: listeners that complete at once (a write that failed in the encoder)
   * only queue their errors.
   */
  private def writeNextMessageIfPossible(): Unit = {
    if (closed || writeInFlight || !ctx.channel().isWritable) return
    writeInFlight = true
    val error = errors.poll()
    if (error != null) { ctx.writeAndFlush(error).addListener(writeListener); return }
    var batchBytes = 0L
    var last: ChannelFuture = null
    var stop = false
    while (!stop && !closed) {
      val reader = available.poll()
      if (reader == null) stop = true
      else {
        reader.registeredAsAvailable = false
        val next =
          try reader.getNextMessage(counters)
          catch { case e: Throwable => failReader(reader, kindOf(e), e); null }
        if (next != null) {
          val payload = next match {
            case b: BufferResponse => b.payloadSize
            case p: PackedBufferResponse => p.payloadSize
            case _ => -1
          }
          if (payload >= 0) {
            counters.buffersSent.increment()
            counters.bytesSent.add(payload.toLong)
            batchBytes += payload
          }
          last = ctx.write(next)
          if (reader.isFinished) remove(reader)
          else if (payload >= 0 && reader.isAvailable) { available.add(reader); reader.registeredAsAvailable = true }
          if (batchBytes >= MaxBytesPerFlush || !ctx.channel().isWritable) stop = true
        }
        if (!errors.isEmpty) stop = true
      }
    }
    if (last != null) {
      ctx.flush()
      last.addListener(writeListener)
    } else {
      writeInFlight = false
      if (!errors.isEmpty) writeNextMessageIfPossible()
    }
  }

  private def remove(reader: NetworkSequenceViewReader): Unit = {
    if (readers.remove(reader.receiverId) != null) {
      counters.activeReaders.decrementAndGet()
      peer.removeReader()
    }
    reader.release(partitionManager)
  }

  // ---- connection events -----------------------------------------------------------------------

  override def channelWritabilityChanged(ctx: ChannelHandlerContext): Unit = {
    writeNextMessageIfPossible()
    ctx.fireChannelWritabilityChanged()
  }

  override def channelInactive(ctx: ChannelHandlerContext): Unit = {
    releaseAll()
    ctx.fireChannelInactive()
  }

  override def exceptionCaught(ctx: ChannelHandlerContext, cause: Throwable): Unit = fatal(cause)

  /** Releases every reader and, when the connection is broken, tells the client why and closes it. */
  def fatal(cause: Throwable): Unit = {
    if (closed) return
    cause match {
      case _: TransportProtocolException => log.warn(cause.getMessage)
      case _ => log.debug(s"Closing the Sluice connection from ${ctx.channel().remoteAddress()}", cause)
    }
    releaseAll()
    val ch = ctx.channel()
    if (ch.isActive) {
      val kind =
        if (cause.isInstanceOf[TransportProtocolException]) ErrorKind.ProtocolError
        else if (ResourceExhaustion(cause)) ErrorKind.ServerError
        else ErrorKind.Other
      ctx.writeAndFlush(ErrorResponse.connectionWide(kind, cause)).addListener(ChannelFutureListener.CLOSE)
    }
  }

  /** The client closes the connection (CloseRequest) or it went away: drop every reader. */
  def releaseAll(): Unit = if (!closed) {
    closed = true
    val all = new java.util.ArrayList(readers.values())
    all.forEach(r => remove(r))
    available.clear()
    errors.clear()
  }
}

private[netty] object PartitionRequestQueue {
  private val log = LoggerFactory.getLogger(classOf[PartitionRequestQueue])

  /** Error responses a client may leave unread before the server gives up on it. */
  val MaxPendingErrors = 1024

  /** Payload bytes written before one flush (a few buffers: fewer system calls, same latency). */
  val MaxBytesPerFlush: Long = 128L << 10

  /**
   * How a reader's failure is reported: a missing partition or failed producer as such, a peer
   * limit as a refusal, and a failure of the server's own (out of memory or of file descriptors, or
   * anything but an IOException: a bug) as a server error, which the client does not blame on the
   * producer; an IOException (a file that cannot be read) says the data cannot be read.
   */
  def kindOf(e: Throwable): ErrorKind = e match {
    case _: PartitionNotFoundException => ErrorKind.PartitionNotFound
    case _: ProducerFailedException => ErrorKind.ProducerFailed
    case _: PeerLimitException => ErrorKind.Refused
    case _ if ResourceExhaustion(e) => ErrorKind.ServerError
    case _: IOException => ErrorKind.Other
    case _ => ErrorKind.ServerError
  }
}
