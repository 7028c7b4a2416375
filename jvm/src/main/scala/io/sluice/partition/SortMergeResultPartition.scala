package io.sluice.partition

import java.io.IOException

import io.sluice.memory.LocalBufferPool
import io.sluice.serialization.RecordFraming
import org.apache.spark.unsafe.Platform

/**
 * A result partition consumed only once complete, written sort-merge style (Flink's
 * SortMergeResultPartition, FLIP-148 / FLINK-19582): the records of every subpartition go into a
 * [[DataBuffer]] of network buffers; when it can grow no more it is spilled to the partition's
 * file grouped by subpartition (one "region" per spill) and reused. Its memory does not depend on
 * the number of subpartitions, so a map task writing thousands of reduce partitions costs what one
 * writing ten does, where a buffer per subpartition would exhaust the pool or write thousands of
 * tiny buffers.
 *
 * The layout is chosen again at every spill from the pool's size at that moment: while the pool
 * has [[DataBuffer.HashBasedMinBuffersPerSubpartition]] buffers per subpartition, each
 * subpartition fills buffers of its own, written to the file as they are
 * ([[HashBasedDataBuffer]]); otherwise the subpartitions share buffers and are gathered apart at
 * the spill ([[SortBasedDataBuffer]]). Readers cannot tell the two apart.
 *
 * [[finish]] spills the rest, closes the file, writes its index beside it and hands the pool back;
 * from then on the partition lives in its files, holds no file handle nor anything per
 * subpartition, and can be read any number of times, by any number of [[BlockingSubpartitionView]]s
 * at once, until released. Once registered, the [[ResultPartitionManager]] keeps only its totals
 * and rebuilds it (with [[SortMergeResultPartition.adopt]]) for readers.
 *
 * Writing belongs to the producer's task thread; views are created once the partition is finished.
 *
 * @param bufferPool the data buffer's memory: 1 required buffer (spilling always makes progress),
 *                   at most spark.sluice.memory.sortBufferSize
 * @param hashBased  whether (number of subpartitions, pool size) calls for the hash-based layout;
 *                   [[DataBuffer.hashBased]], or a fixed answer in tests
 */
final class SortMergeResultPartition(
    partitionId: ResultPartitionID,
    numSubpartitions: Int,
    bufferPool: LocalBufferPool,
    val file: PartitionedFile,
    bufferRequestTimeoutMs: Long,
    hashBased: (Int, Int) => Boolean = DataBuffer.hashBased)
  extends ResultPartition(partitionId, ResultPartitionType.Blocking, numSubpartitions, bufferPool) {

  private val segmentSize = bufferPool.segmentSize
  @volatile private var dataBuffer = // none over a finished file (adopted or rebuilt): nothing is written
    if (file.isFinished) null
    else DataBuffer.create(bufferPool, numSubpartitions, hashBased(numSubpartitions, bufferPool.numBuffers))
  @volatile private var spills = 0
  @volatile private var spillTimeNanos = 0L // written by the producer thread only

  override protected def writeFrame(subpartition: Int, header: Int, base: AnyRef, offset: Long, length: Int): Unit =
    try {
      if (dataBuffer == null) throw new IllegalStateException(s"Result partition ($partitionId) gave its memory back")
      if (!dataBuffer.append(subpartition, header, base, offset, length)) {
        if (!dataBuffer.isEmpty) spill()
        if (dataBuffer.numBuffers == 0) {
          // Not one buffer yet: the executor's other pools hold this pool's share. Wait for it.
          val b = whileBackPressured(bufferPool.requestBufferBlocking(bufferRequestTimeoutMs))
          if (b == null) throw poolDestroyed() // released: the producer's failure
          dataBuffer.addBuffer(b)
        }
        if (!dataBuffer.append(subpartition, header, base, offset, length)) {
          writeLargeFrame(subpartition, header, base, offset, length)
        }
      }
    } catch {
      // A release from another thread deletes the file under the producer (and destroys the pool,
      // which then gives no buffer: the data buffer cannot grow, and an empty one fails above).
      case e: IOException if isReleased && !e.isInstanceOf[ProducerFailedException] =>
        throw new ProducerFailedException(partitionId, failureCause)
    }

  /**
   * Writes the data buffer's frames to the file, grouped by subpartition: one region. Then fits the
   * data buffer to the pool's current size, changing its layout when that size calls for the other.
   */
  private def spill(): Unit = {
    val start = System.nanoTime()
    try {
      numBuffersOut.add(dataBuffer.spillTo(file))
      spills += 1
      val poolSize = bufferPool.numBuffers
      val hashBasedNow = hashBased(numSubpartitions, poolSize)
      if (hashBasedNow != isHashBased) {
        dataBuffer.release()
        dataBuffer = DataBuffer.create(bufferPool, numSubpartitions, hashBasedNow)
      } else dataBuffer.trimTo(poolSize)
    } finally spillTimeNanos += System.nanoTime() - start
  }

  /** Whether the frames are collected hash-based now (until the next spill). */
  def isHashBased: Boolean = dataBuffer.isInstanceOf[HashBasedDataBuffer]

  /**
   * A frame larger than the whole data buffer (which was just spilled, so the subpartition's order
   * holds): streamed to the file in segment-sized buffers, a region of its own.
   */
  private def writeLargeFrame(subpartition: Int, header: Int, base: AnyRef, offset: Long, length: Int): Unit = {
    val start = System.nanoTime()
    try {
      var out = file.beginBuffer(segmentSize)
      val h = if (SortMergeResultPartition.LittleEndian) Integer.reverseBytes(header) else header
      Platform.putInt(null, out, h)
      var filled = RecordFraming.HeaderSize
      var done = 0
      while (done < length) {
        if (filled == segmentSize) {
          file.endBuffer(subpartition, filled)
          numBuffersOut.increment()
          out = file.beginBuffer(segmentSize)
          filled = 0
        }
        val n = math.min(length - done, segmentSize - filled)
        Platform.copyMemory(base, offset + done, null, out + filled, n)
        done += n
        filled += n
      }
      file.endBuffer(subpartition, filled)
      numBuffersOut.increment()
      spills += 1
    } finally spillTimeNanos += System.nanoTime() - start
  }

  override protected def flushSubpartition(subpartition: Int): Unit = () // read only when complete

  /** Spills the rest, closes the file and gives the data buffer's memory back. */
  override protected def finishWriting(): Unit = {
    val start = System.nanoTime()
    try {
      if (dataBuffer != null && !dataBuffer.isEmpty) spill()
      file.finishWriting()
    } finally {
      dropDataBuffer()
      spillTimeNanos += System.nanoTime() - start
    }
    bufferPool.lazyDestroy()
  }

  /** Gives the data buffer's memory back and drops it (its per-subpartition arrays with it). */
  private def dropDataBuffer(): Unit = {
    val d = dataBuffer
    if (d != null) {
      d.release()
      dataBuffer = null
    }
  }

  override protected def onRelease(cause: Throwable): Unit = file.delete()

  /** Gives the data buffer's memory and the file's write buffers back (producer thread, after a failure). */
  override def closeBufferBuilders(): Unit = {
    dropDataBuffer()
    file.abortWriting()
  }

  override def createSubpartitionView(start: Int, end: Int, listener: BufferAvailabilityListener): ResultSubpartitionView =
    createSubpartitionView(start, end, listener, None)

  /** A view reading through `readers`' kept file handles (the server's event loops) or its own. */
  def createSubpartitionView(start: Int, end: Int, listener: BufferAvailabilityListener,
      readers: Option[PartitionedFileReaderCache]): ResultSubpartitionView = {
    if (!isFinished) throw new IllegalStateException(s"$this is not complete yet; blocking partitions are read once finished")
    if (isReleased) throw new ProducerFailedException(partitionId, failureCause)
    if (start < 0 || end > numSubpartitions || start >= end) {
      throw new IndexOutOfBoundsException(s"$this has no subpartitions [$start, $end)")
    }
    val view = new BlockingSubpartitionView(this, start, end, readers)
    listener.notifyDataAvailable()
    view
  }

  /** Network buffers held by the data buffer (outputQueueLength). */
  override def numQueuedBuffers: Int = {
    val d = dataBuffer
    if (d == null) 0 else d.numBuffers
  }

  /** Waiting for buffers plus compressing and writing spills (including the last, at finish). */
  override def blockedWriteTimeNanos: Long = super.blockedWriteTimeNanos + spillTimeNanos

  /** How many regions the producer wrote (spills of the data buffer, the last one included). */
  def numSpills: Int = spills

  /** Stored bytes of each subpartition: the sizes MapStatus reports (read from the file's index). */
  def subpartitionSizes: Array[Long] = file.subpartitionSizes
}

object SortMergeResultPartition {
  private val LittleEndian = java.nio.ByteOrder.nativeOrder() == java.nio.ByteOrder.LITTLE_ENDIAN

  /**
   * A finished partition over a finished file: one another executor wrote (decommissioning moved
   * it here, see [[PartitionedFileIndex]]), or one the [[ResultPartitionManager]] rebuilds from what
   * it kept. Readable at once, as often as needed, until released; releasing it deletes the file.
   * `pool` is never drawn from; it is destroyed here, like a written partition's once finished.
   */
  def adopt(id: ResultPartitionID, file: PartitionedFile, pool: LocalBufferPool): SortMergeResultPartition = {
    val p = new SortMergeResultPartition(id, file.numSubpartitions, pool, file, 0L)
    p.finish()
    p
  }
}
