package io.sluice.partition

import java.util.concurrent.atomic.LongAdder

import io.sluice.buffer.{BufferBuilder, BufferConsumer}
import io.sluice.memory.LocalBufferPool
import io.sluice.serialization.RecordFraming
import org.apache.spark.unsafe.Platform

/**
 * The output of one producer (Flink's ResultPartition, with BufferWritingResultPartition's
 * write path): one [[ResultSubpartition]]-like queue per consumer channel and the
 * [[LocalBufferPool]] its buffers come from.
 *
 * Records arrive length-framed (a 4-byte big-endian length, then the bytes) and are copied once
 * into the target subpartition's current [[BufferBuilder]], spanning as many buffers as they
 * need. A full buffer is finished and handed on at once ("flush after buffer full"); partly filled
 * ones become readable through [[flush]] (the output flusher, or every record with timeout 0).
 *
 * The writing methods belong to the producer's task thread; [[flush]], [[flushAll]] and the
 * metrics may be called from any thread; subclasses lock their queues.
 */
abstract class ResultPartition(
    val partitionId: ResultPartitionID,
    val partitionType: ResultPartitionType,
    val numSubpartitions: Int,
    val bufferPool: LocalBufferPool) {

  require(numSubpartitions > 0, s"$partitionId needs at least one subpartition")

  private val builders = new Array[BufferBuilder](numSubpartitions)
  @volatile private var finished = false
  @volatile private var released = false
  @volatile private var failure: Throwable = _

  // Flink's task I/O counters for this producer (read by metrics from any thread).
  val numRecordsOut = new LongAdder
  val numBytesOut = new LongAdder
  val numBuffersOut = new LongAdder
  /** Nanoseconds the producer was blocked waiting for an output buffer (backPressuredTime). */
  val backPressuredTimeNanos = new LongAdder
  /** When the producer's current wait for a buffer began (System.nanoTime), 0 when not waiting. */
  @volatile private var backPressuredSince = 0L

  /**
   * Runs `waitForBuffer` (the producer blocking for an output buffer) and counts its duration as
   * backpressure; a wait still going on is visible to [[backPressuredTimeNanosNow]].
   */
  protected final def whileBackPressured[T](waitForBuffer: => T): T = {
    val start = System.nanoTime()
    backPressuredSince = start
    try waitForBuffer
    finally {
      backPressuredTimeNanos.add(System.nanoTime() - start)
      backPressuredSince = 0L
    }
  }

  /** Back-pressured nanoseconds so far, including a wait that has not ended yet. Any thread. */
  def backPressuredTimeNanosNow: Long = {
    val since = backPressuredSince
    val done = backPressuredTimeNanos.sum()
    if (since == 0L) done else done + math.max(0L, System.nanoTime() - since)
  }

  /**
   * Nanoseconds the producer spent blocked on output rather than producing: waiting for buffers,
   * plus (blocking partitions) writing spills to disk. What Spark reports as shuffle write time.
   */
  def blockedWriteTimeNanos: Long = backPressuredTimeNanos.sum()

  /** A fresh buffer for `subpartition`; may block (pipelined) or spill (blocking). */
  protected def requestBufferBuilder(subpartition: Int): BufferBuilder

  /** Appends a new, still empty buffer to the subpartition's queue. */
  protected def addToSubpartition(subpartition: Int, consumer: BufferConsumer): Unit

  /** The current buffer of `subpartition` was finished: readers may take all of it. */
  protected def onBufferFinished(subpartition: Int): Unit

  protected def flushSubpartition(subpartition: Int): Unit

  /** Called once, after every buffer was finished, to end the subpartitions. */
  protected def onFinish(): Unit

  protected def onRelease(cause: Throwable): Unit

  def createSubpartitionView(start: Int, end: Int, listener: BufferAvailabilityListener): ResultSubpartitionView

  /** Buffers queued in the subpartitions and not yet taken by readers (outputQueueLength). */
  def numQueuedBuffers: Int

  // ---- the write path (producer thread) ----------------------------------------------------

  /** Appends one record, its bytes at (base, offset) as for Platform.copyMemory, to `subpartition`. */
  final def emitRecord(subpartition: Int, base: AnyRef, offset: Long, length: Int): Unit = {
    writeFrame(subpartition, length, base, offset, length)
    numRecordsOut.increment()
    onRecordWritten(subpartition)
  }

  /** A whole record was written to `subpartition` (producer thread): a hook for eager flushing. */
  protected def onRecordWritten(subpartition: Int): Unit = ()

  /**
   * Appends a latency marker (frame length -1, then its 16 bytes: creation time, producer stage
   * and producer index) to every subpartition, behind the records already written there.
   */
  final def broadcastLatencyMarker(createdAtMillis: Long, producerStage: Int, producerIndex: Int): Unit = {
    val bytes = ResultPartition.latencyMarkerBytes(createdAtMillis, producerStage, producerIndex)
    var i = 0
    while (i < numSubpartitions) {
      writeFrame(i, RecordFraming.LatencyMarker, bytes, Platform.BYTE_ARRAY_OFFSET, bytes.length)
      onLatencyMarkerWritten(i)
      i += 1
    }
  }

  /** A latency marker was written to `subpartition` (producer thread): a hook for eager flushing. */
  protected def onLatencyMarkerWritten(subpartition: Int): Unit = ()

  private def writeFrame(subpartition: Int, header: Int, base: AnyRef, offset: Long, length: Int): Unit = {
    checkWritable()
    var builder = builders(subpartition)
    if (builder == null) builder = newBufferBuilder(subpartition)
    if (!builder.appendIntIfFits(header)) {
      var shift = 24
      while (shift >= 0) {
        if (builder.isFull) builder = nextBufferBuilder(subpartition)
        builder.appendByte((header >>> shift).toByte)
        shift -= 8
      }
    }
    var copied = 0
    while (copied < length) {
      if (builder.isFull) builder = nextBufferBuilder(subpartition)
      copied += builder.append(base, offset + copied, length - copied)
    }
    builder.commit()
    numBytesOut.add(4L + length)
    if (builder.isFull) finishBufferBuilder(subpartition)
  }

  private def nextBufferBuilder(subpartition: Int): BufferBuilder = {
    finishBufferBuilder(subpartition)
    newBufferBuilder(subpartition)
  }

  private def newBufferBuilder(subpartition: Int): BufferBuilder = {
    val b = requestBufferBuilder(subpartition)
    builders(subpartition) = b
    addToSubpartition(subpartition, b.createBufferConsumer())
    b
  }

  /** Finishes the current buffer of `subpartition` (if any) and drops the writer's reference. */
  protected final def finishBufferBuilder(subpartition: Int): Unit = {
    val b = builders(subpartition)
    if (b != null) {
      builders(subpartition) = null
      b.finish()
      b.close()
      numBuffersOut.increment()
      onBufferFinished(subpartition)
    }
  }

  /** Whether `subpartition` has a buffer being written (the writer's unfinished buffer). */
  protected final def hasBufferBuilder(subpartition: Int): Boolean = builders(subpartition) != null

  // ---- flushing (any thread) ----------------------------------------------------------------

  /** Makes what is written to `subpartition` readable without closing its buffer. */
  final def flush(subpartition: Int): Unit = if (!released) flushSubpartition(subpartition)

  final def flushAll(): Unit = {
    var i = 0
    while (i < numSubpartitions) { flush(i); i += 1 }
  }

  // ---- lifecycle ------------------------------------------------------------------------------

  /** Ends the partition: every buffer is finished and readers see the end after the last one. */
  final def finish(): Unit = {
    checkWritable()
    var i = 0
    while (i < numSubpartitions) { finishBufferBuilder(i); i += 1 }
    finished = true
    onFinish()
  }

  /**
   * Releases the partition: queued buffers go back to the pool, readers get `cause` (null: a clean
   * release after consumption), and the pool is destroyed, which wakes a producer waiting for a
   * buffer. Idempotent, any thread. The buffers the producer is writing stay its own until it
   * calls [[closeBufferBuilders]] on its thread.
   */
  final def release(cause: Throwable): Unit = {
    val first = synchronized {
      val f = !released
      if (f) { released = true; failure = cause }
      f
    }
    if (first) {
      onRelease(cause)
      bufferPool.lazyDestroy()
    }
  }

  /** The producer's clean-up after a failure (producer thread): drops its unfinished buffers. */
  final def closeBufferBuilders(): Unit = {
    var i = 0
    while (i < numSubpartitions) {
      val b = builders(i)
      if (b != null) { builders(i) = null; b.finish(); b.close() }
      i += 1
    }
  }

  def isFinished: Boolean = finished

  def isReleased: Boolean = released

  def failureCause: Throwable = failure

  private def checkWritable(): Unit = {
    if (released) throw new ProducerFailedException(partitionId, failure)
    if (finished) throw new IllegalStateException(s"Result partition ($partitionId) is already finished")
  }

  /** Used buffers over the pool size (outPoolUsage); 0 once the pool is gone. */
  def outPoolUsage: Float = if (bufferPool.isDestroyed) 0f else bufferPool.usage

  override def toString: String = s"${partitionType.name} result partition ($partitionId, $numSubpartitions subpartitions)"
}

object ResultPartition {
  private[partition] def latencyMarkerBytes(createdAtMillis: Long, stage: Int, index: Int): Array[Byte] = {
    val bb = java.nio.ByteBuffer.allocate(RecordFraming.LatencyMarkerSize)
    bb.putLong(createdAtMillis).putInt(stage).putInt(index)
    bb.array()
  }
}
