package io.sluice.partition

import io.sluice.buffer.{BufferBuilder, BufferConsumer}
import io.sluice.memory.LocalBufferPool

/**
 * A result partition that writes each subpartition into buffers of its own (Flink's
 * BufferWritingResultPartition): one current [[BufferBuilder]] per subpartition, drawn from the
 * partition's [[LocalBufferPool]].
 *
 * Frames are copied once into the target subpartition's current buffer, spanning as many buffers
 * as they need. A full buffer is finished and handed on at once ("flush after buffer full"); partly
 * filled ones become readable through [[flush]] (the output flusher, or every record with timeout
 * 0). Its cost grows with the number of subpartitions (one buffer being written each), which suits
 * pipelined partitions, read while written; blocking ones use [[SortMergeResultPartition]].
 *
 * The writing methods belong to the producer's task thread; subclasses lock their queues.
 */
abstract class BufferWritingResultPartition(
    partitionId: ResultPartitionID,
    partitionType: ResultPartitionType,
    numSubpartitions: Int,
    bufferPool: LocalBufferPool)
  extends ResultPartition(partitionId, partitionType, numSubpartitions, bufferPool) {

  private val builders = new Array[BufferBuilder](numSubpartitions)

  /** A fresh buffer for `subpartition`; may block (backpressure). */
  protected def requestBufferBuilder(subpartition: Int): BufferBuilder

  /** Appends a new, still empty buffer to the subpartition's queue. */
  protected def addToSubpartition(subpartition: Int, consumer: BufferConsumer): Unit

  /** The current buffer of `subpartition` was finished: readers may take all of it. */
  protected def onBufferFinished(subpartition: Int): Unit

  override protected final def writeFrame(subpartition: Int, header: Int, base: AnyRef, offset: Long, length: Int): Unit = {
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

  /** Every subpartition's current buffer is finished: readers may take all of it. */
  override protected final def finishWriting(): Unit = {
    var i = 0
    while (i < numSubpartitions) { finishBufferBuilder(i); i += 1 }
  }

  /** Drops the producer's unfinished buffers (their consumers keep what they hold). */
  override final def closeBufferBuilders(): Unit = {
    var i = 0
    while (i < numSubpartitions) {
      val b = builders(i)
      if (b != null) { builders(i) = null; b.finish(); b.close() }
      i += 1
    }
  }
}
