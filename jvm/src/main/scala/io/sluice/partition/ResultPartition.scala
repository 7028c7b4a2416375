package io.sluice.partition

import java.util.concurrent.atomic.LongAdder

import io.sluice.memory.LocalBufferPool
import io.sluice.metrics.WaitTime
import io.sluice.serialization.RecordFraming
import org.apache.spark.unsafe.Platform

/**
 * The output of one producer (Flink's ResultPartition): its ids, its task I/O counters, its
 * lifecycle (finish, release, failure) and the entry points of the write path, which hand each
 * length-framed element (a 4-byte big-endian length, then the bytes; see [[RecordFraming]]) to
 * the subclass's [[writeFrame]]. How frames reach buffers is the subclass's business:
 * [[BufferWritingResultPartition]] keeps a buffer per subpartition (pipelined), while
 * [[SortMergeResultPartition]] collects them in one [[DataBuffer]] for all of them (blocking).
 *
 * The writing methods belong to the producer's task thread; [[flush]], [[flushAll]], [[release]]
 * and the metrics may be called from any thread.
 */
abstract class ResultPartition(
    val partitionId: ResultPartitionID,
    val partitionType: ResultPartitionType,
    val numSubpartitions: Int,
    val bufferPool: LocalBufferPool) {

  require(numSubpartitions > 0, s"$partitionId needs at least one subpartition")

  @volatile private var finished = false
  @volatile private var released = false
  @volatile private var failure: Throwable = _

  // Flink's task I/O counters for this producer (read by metrics from any thread).
  val numRecordsOut = new LongAdder
  val numBytesOut = new LongAdder
  val numBuffersOut = new LongAdder

  private val backPressured = new WaitTime

  /** Nanoseconds the producer was blocked waiting for an output buffer (backPressuredTime). */
  val backPressuredTimeNanos: LongAdder = backPressured.nanos

  /**
   * Runs `waitForBuffer` (the producer blocking for an output buffer) and counts its duration as
   * backpressure; a wait still going on is visible to [[backPressuredTimeNanosNow]].
   */
  protected final def whileBackPressured[T](waitForBuffer: => T): T = backPressured.time(waitForBuffer)

  /** Back-pressured nanoseconds so far, including a wait that has not ended yet. Any thread. */
  def backPressuredTimeNanosNow: Long = backPressured.nanosNow

  /**
   * Nanoseconds the producer spent blocked on output rather than producing: waiting for buffers,
   * plus (blocking partitions) writing spills to disk. What Spark reports as shuffle write time.
   */
  def blockedWriteTimeNanos: Long = backPressuredTimeNanos.sum()

  /**
   * Appends one frame to `subpartition` (producer thread): the 4-byte big-endian `header` (the
   * record's length, or [[RecordFraming.LatencyMarker]]) and then `length` bytes at (base, offset)
   * as for Platform.copyMemory.
   */
  protected def writeFrame(subpartition: Int, header: Int, base: AnyRef, offset: Long, length: Int): Unit

  /** Makes what is written to `subpartition` readable now, if this kind of partition can. */
  protected def flushSubpartition(subpartition: Int): Unit

  /** Writes out everything still held by the writer (producer thread, before the partition is finished). */
  protected def finishWriting(): Unit

  /** Called once, after [[finishWriting]] and after the partition was marked finished. */
  protected def onFinish(): Unit = ()

  protected def onRelease(cause: Throwable): Unit

  /**
   * The producer's clean-up after a failure (producer thread): gives back the buffers it was still
   * writing into, which a [[release]] from another thread leaves alone.
   */
  def closeBufferBuilders(): Unit

  def createSubpartitionView(start: Int, end: Int, listener: BufferAvailabilityListener): ResultSubpartitionView

  /** Buffers held by the partition and not yet taken by readers (outputQueueLength). */
  def numQueuedBuffers: Int

  // ---- the write path (producer thread) ----------------------------------------------------

  /** Appends one record, its bytes at (base, offset) as for Platform.copyMemory, to `subpartition`. */
  final def emitRecord(subpartition: Int, base: AnyRef, offset: Long, length: Int): Unit = {
    checkWritable()
    writeFrame(subpartition, length, base, offset, length)
    numBytesOut.add(RecordFraming.HeaderSize.toLong + length)
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
    checkWritable()
    val bytes = ResultPartition.latencyMarkerBytes(createdAtMillis, producerStage, producerIndex)
    var i = 0
    while (i < numSubpartitions) {
      writeFrame(i, RecordFraming.LatencyMarker, bytes, Platform.BYTE_ARRAY_OFFSET, bytes.length)
      numBytesOut.add(RecordFraming.HeaderSize.toLong + bytes.length)
      onLatencyMarkerWritten(i)
      i += 1
    }
  }

  /** A latency marker was written to `subpartition` (producer thread): a hook for eager flushing. */
  protected def onLatencyMarkerWritten(subpartition: Int): Unit = ()

  // ---- flushing (any thread) ----------------------------------------------------------------

  /** Makes what is written to `subpartition` readable without closing its buffer. */
  final def flush(subpartition: Int): Unit = if (!released) flushSubpartition(subpartition)

  final def flushAll(): Unit = {
    var i = 0
    while (i < numSubpartitions) { flush(i); i += 1 }
  }

  // ---- lifecycle ------------------------------------------------------------------------------

  /** Ends the partition: everything written becomes readable, and readers see the end after it. */
  final def finish(): Unit = {
    checkWritable()
    finishWriting()
    finished = true
    onFinish()
  }

  /**
   * Releases the partition: held buffers go back to the pool, readers get `cause` (null: a clean
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

  def isFinished: Boolean = finished

  def isReleased: Boolean = released

  def failureCause: Throwable = failure

  /** Throws when the producer may no longer write: the partition was released or finished. */
  protected final def checkWritable(): Unit = {
    if (released) throw new ProducerFailedException(partitionId, failure)
    if (finished) throw new IllegalStateException(s"Result partition ($partitionId) is already finished")
  }

  /**
   * The error for a producer whose pool answered no buffer because it is destroyed. Only
   * [[release]] destroys the pool of a partition still being written, and it marks the partition
   * released first (a volatile write before the pool's lock is taken), so a producer that saw the
   * destroyed pool sees the release too and reports the producer's failure.
   */
  protected final def poolDestroyed(): Exception =
    if (released) new ProducerFailedException(partitionId, failure)
    else new IllegalStateException(s"The buffer pool of $this is destroyed")

  /** Used buffers over the pool size (outPoolUsage); 0 once the pool is gone. */
  def outPoolUsage: Float = if (bufferPool.isDestroyed) 0f else bufferPool.usage

  override def toString: String = ResultPartition.describe(partitionType, partitionId, numSubpartitions)
}

object ResultPartition {

  /** How messages name a partition: its type, id and subpartitions. */
  def describe(kind: ResultPartitionType, id: ResultPartitionID, numSubpartitions: Int): String =
    s"${kind.name} result partition ($id, $numSubpartitions subpartitions)"

  private[partition] def latencyMarkerBytes(createdAtMillis: Long, stage: Int, index: Int): Array[Byte] = {
    val bb = java.nio.ByteBuffer.allocate(RecordFraming.LatencyMarkerSize)
    bb.putLong(createdAtMillis).putInt(stage).putInt(index)
    bb.array()
  }
}
