package io.sluice.partition.consumer

import java.util.concurrent.TimeoutException
import java.util.concurrent.atomic.LongAdder
import java.util.zip.CRC32C

import io.netty.buffer.ByteBuf
import io.sluice.buffer.BlockCodec
import io.sluice.memory.{LocalBufferPool, MemorySegment, NetworkBuffer, NetworkBufferPool}

/**
 * The consumer's side of a shuffle read (Flink's SingleInputGate): one [[InputChannel]] per
 * producer partition, the gate's pool of floating buffers shared by its remote channels, and a
 * queue of channels that have data. [[getNext]] hands the task thread a buffer from whichever
 * channel has one, never waiting on any single channel, verifies the checksum of spilled data and
 * decompresses compressed buffers, and answers null once every channel has ended.
 *
 * Channels notify the gate from Netty or producer threads ([[notifyChannelNonEmpty]]); everything
 * else belongs to the task thread.
 *
 * @param floatingBuffers   the gate's LocalBufferPool (floating buffers of remote channels)
 * @param codec             decompresses buffers stored compressed (spark.shuffle.compress)
 */
final class SingleInputGate(
    val owner: String,
    val networkBufferPool: NetworkBufferPool,
    val floatingBuffers: LocalBufferPool,
    codec: Option[BlockCodec],
    requestTimeoutMs: Long,
    bufferRequestTimeoutMs: Long) {

  @volatile private var channels: Array[InputChannel] = Array.empty
  private val channelsWithData = new java.util.ArrayDeque[InputChannel]()
  private var queued: Array[Boolean] = Array.empty
  private var ended: Array[Boolean] = Array.empty
  private var numEnded = 0
  private var requested = false
  @volatile private var closed = false

  // Scratch buffers (unpooled segments, counted in the network memory): spilled local data is
  // read into one, compressed data decompressed into the other. Each is lent to one buffer at a time.
  private var scratchSegments: java.util.List[MemorySegment] = java.util.Collections.emptyList()
  private var readScratch: NetworkBuffer = _
  private var decompressScratch: NetworkBuffer = _
  private val crc = new CRC32C

  // Flink's input metrics of this consumer.
  val numBytesInLocal = new LongAdder
  val numBytesInRemote = new LongAdder
  val numBuffersInLocal = new LongAdder
  val numBuffersInRemote = new LongAdder
  /** Nanoseconds the task waited in [[getNext]] with no buffer ready (idleTime). */
  val idleTimeNanos = new LongAdder
  /** When the task's current wait for input began (System.nanoTime), 0 when not waiting. */
  @volatile private var idleSince = 0L

  def setChannels(cs: Array[InputChannel]): Unit = {
    require(!requested, "channels are set before the partitions are requested")
    channels = cs
    queued = new Array[Boolean](cs.length)
    ended = new Array[Boolean](cs.length)
  }

  def numberOfChannels: Int = channels.length

  def channel(i: Int): InputChannel = channels(i)

  /**
   * Takes the gate's scratch segments and starts every channel (local views open, remote
   * partition requests go out). `needsReadBuffer`: some local channel reads a spilled partition.
   */
  def requestPartitions(needsReadBuffer: Boolean): Unit = {
    require(!requested, "partitions are requested once")
    requested = true
    val n = (if (needsReadBuffer) 1 else 0) + (if (codec.isDefined) 1 else 0)
    if (n > 0) {
      scratchSegments = networkBufferPool.requestUnpooledSegments(n, bufferRequestTimeoutMs, owner)
      var i = 0
      if (needsReadBuffer) { readScratch = new NetworkBuffer(scratchSegments.get(i), NoRecycle); i += 1 }
      if (codec.isDefined) decompressScratch = new NetworkBuffer(scratchSegments.get(i), NoRecycle)
    }
    channels.foreach(_.requestSubpartitions())
  }

  /** Called by a channel, from any thread, when it has data, an error or its end. */
  def notifyChannelNonEmpty(channel: InputChannel): Unit = channelsWithData.synchronized {
    val i = channel.channelIndex
    if (!queued(i) && !ended(i)) {
      queued(i) = true
      channelsWithData.add(channel)
      channelsWithData.notifyAll()
    }
  }

  /**
   * The next buffer ready for deserialisation, or null when every channel has ended. The caller
   * releases the returned buffer before calling again. Throws the error of a failed channel
   * ([[InputChannelException]]), or a timeout when no channel delivered anything for
   * spark.sluice.network.requestTimeout.
   */
  def getNext(): InputBuffer = {
    if (!requested) throw new IllegalStateException("requestPartitions() first")
    while (true) {
      if (numEnded == channels.length) return null
      val channel = waitForChannelWithData()
      if (channel == null) return null
      val next = try channel.getNextBuffer() catch {
        case e: InputChannelException => throw e
        case e: Throwable => throw new InputChannelException(channel, e)
      }
      if (next != null) {
        if (next.moreAvailable) notifyChannelNonEmpty(channel)
        if (next.isEndOfPartition) {
          endChannel(channel)
        } else {
          return prepare(channel, next)
        }
      }
    }
    null
  }

  /** The next queued channel that has not ended, or null once every channel ended. */
  private def waitForChannelWithData(): InputChannel = channelsWithData.synchronized {
    var c = pollNotEnded()
    if (c == null) {
      val start = System.nanoTime()
      idleSince = start
      val deadline = start + requestTimeoutMs * 1000000L
      try {
        while (c == null) {
          if (numEnded == channels.length) return null
          if (closed) throw new IllegalStateException(s"$owner: the input gate is closed")
          val left = deadline - System.nanoTime()
          if (left <= 0) {
            val waiting = channels.indices.filterNot(ended).map(channels(_).description)
            throw new TimeoutException(s"$owner received nothing for ${requestTimeoutMs}ms " +
              s"(spark.sluice.network.requestTimeout) from ${waiting.mkString("; ")}")
          }
          channelsWithData.wait(math.max(1L, left / 1000000L))
          c = pollNotEnded()
        }
      } finally {
        idleTimeNanos.add(System.nanoTime() - start)
        idleSince = 0L
      }
    }
    queued(c.channelIndex) = false
    c
  }

  /**
   * The next queued channel that has not ended. A channel can be queued again while its end is
   * being read (a pipelined partition releases itself when its last reader reaches the end, which
   * notifies every reader; a late error), or notified between handing out its end and
   * [[endChannel]]; once ended it has nothing more to give.
   */
  private def pollNotEnded(): InputChannel = {
    var c = channelsWithData.poll()
    while (c != null && ended(c.channelIndex)) {
      queued(c.channelIndex) = false
      c = channelsWithData.poll()
    }
    c
  }

  private def endChannel(channel: InputChannel): Unit = {
    channelsWithData.synchronized {
      ended(channel.channelIndex) = true
      numEnded += 1
    }
    channel.releaseAllResources()
  }

  private def prepare(channel: InputChannel, next: BufferAndAvailability): InputBuffer = {
    var data = next.buffer
    val size = data.readableBytes()
    try {
      if (next.hasChecksum) {
        crc.reset()
        crc.update(data.nioBuffer(data.readerIndex(), size))
        if (crc.getValue.toInt != next.crc) {
          throw new CorruptBufferException(s"Checksum mismatch in a buffer of ${channel.description}: stored " +
            s"CRC32C ${Integer.toHexString(next.crc)}, read ${Integer.toHexString(crc.getValue.toInt)} over $size bytes")
        }
      }
      if (next.compressed) {
        val c = codec.getOrElse(throw new CorruptBufferException(
          s"${channel.description} sent a compressed buffer, but this reader has no codec"))
        if (next.rawLength < 0 || next.rawLength > decompressScratch.capacity()) {
          throw new CorruptBufferException(s"${channel.description} sent a compressed buffer of raw length " +
            s"${next.rawLength}, more than a segment")
        }
        if (decompressScratch.refCnt() != 1) throw new IllegalStateException("the previous buffer was not released")
        val src = data.nioBuffer(data.readerIndex(), size)
        c.decompress(src, src.position(), size, decompressScratch.nioBuffer(0, decompressScratch.capacity()), 0, next.rawLength)
        val out = decompressScratch.retainedSlice(0, next.rawLength)
        data.release()
        data = out
      }
    } catch {
      case e: CorruptBufferException => data.release(); throw new InputChannelException(channel, e)
      case e: Throwable => data.release(); throw new InputChannelException(channel, new CorruptBufferException(
        s"Could not decompress a buffer of ${channel.description}: $e"))
    }
    if (channel.isRemote) { numBytesInRemote.add(size.toLong); numBuffersInRemote.increment() }
    else { numBytesInLocal.add(size.toLong); numBuffersInLocal.increment() }
    new InputBuffer(data, channel.channelIndex, next.subpartition, channel.isRemote, size)
  }

  /** The scratch buffer a local channel reads a spilled buffer of `length` bytes into. */
  private[consumer] def localReadBuffer(length: Int): ByteBuf = {
    if (readScratch == null) throw new IllegalStateException(s"$owner has no read buffer for spilled local data")
    if (readScratch.refCnt() != 1) throw new IllegalStateException("the previous buffer was not released")
    if (length > readScratch.capacity()) {
      throw new CorruptBufferException(s"A spilled buffer of $length bytes does not fit a ${readScratch.capacity()}-byte segment")
    }
    readScratch.retainedSlice(0, length).clear()
  }

  /** Buffers waiting in remote channels (inputQueueLength). */
  def inputQueueLength: Int = sumChannels(_.numQueuedBuffers)

  // ---- metrics (any thread, best effort) -----------------------------------------------------

  /** Idle nanoseconds so far, including a wait for input that has not ended yet. */
  def idleTimeNanosNow: Long = {
    val since = idleSince
    val done = idleTimeNanos.sum()
    if (since == 0L) done else done + math.max(0L, System.nanoTime() - since)
  }

  /** Exclusive buffers of the gate's remote channels (0 while every channel is local). */
  def numExclusiveBuffers: Int = sumChannels(_.numExclusiveBuffers)

  def numExclusiveBuffersUsed: Int = sumChannels(_.numExclusiveBuffersUsed)

  /** Floating buffers the channels took from the pool but have not filled (not "used" yet). */
  def numFloatingBuffersAvailable: Int = sumChannels(_.numFloatingBuffersAvailable)

  private def sumChannels(f: InputChannel => Int): Int = {
    val cs = channels
    var s = 0
    var i = 0
    while (i < cs.length) { s += f(cs(i)); i += 1 }
    s
  }

  def isFinished: Boolean = channelsWithData.synchronized(numEnded == channels.length)

  /** Releases every channel, the floating pool and the scratch segments. Idempotent. */
  def close(): Unit = if (!closed) {
    closed = true
    channelsWithData.synchronized(channelsWithData.notifyAll())
    var error: Throwable = null
    channels.foreach { c =>
      try c.releaseAllResources() catch { case e: Throwable => if (error == null) error = e }
    }
    floatingBuffers.lazyDestroy()
    if (!scratchSegments.isEmpty) networkBufferPool.recycleUnpooledSegments(scratchSegments)
    scratchSegments = java.util.Collections.emptyList()
    if (error != null) throw error
  }

  def isClosed: Boolean = closed

  override def toString: String = s"SingleInputGate($owner, ${channels.length} channels, ended $numEnded)"
}

/**
 * A buffer the gate hands the task: ready to deserialise (decompressed); released by the task.
 * `transferredBytes` is its size as its producer stored and sent it (compressed, when it was).
 */
final class InputBuffer(val buffer: ByteBuf, val channelIndex: Int, val subpartition: Int, val isRemote: Boolean,
    val transferredBytes: Int)

/** A buffer's bytes are not what its producer stored (checksum or compression mismatch). */
final class CorruptBufferException(msg: String) extends java.io.IOException(msg)

/** Scratch segments stay with the gate; releasing their last slice must not recycle them. */
private object NoRecycle extends io.sluice.memory.BufferRecycler {
  override def recycle(segment: MemorySegment): Unit = ()
}
