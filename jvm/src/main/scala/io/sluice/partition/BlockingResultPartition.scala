package io.sluice.partition

import io.sluice.buffer.{BufferBuilder, BufferConsumer}
import io.sluice.memory.LocalBufferPool

/**
 * A result partition consumed only once complete (Flink's blocking partition, with the spilling
 * of Flink's early SpillableSubpartition): finished buffers collect in memory until the pool runs
 * dry, then every subpartition's finished buffers are written to the partition's file in Spark's
 * local dirs and go back to the pool, so a result of any size fits in a fixed amount of network
 * memory. [[finish]] writes the rest and hands the pool back; from then on the partition lives in
 * its file and can be read any number of times, by any number of readers at once, until released.
 *
 * Writing belongs to the producer's task thread; views are created once the partition is finished.
 */
final class BlockingResultPartition(
    partitionId: ResultPartitionID,
    numSubpartitions: Int,
    bufferPool: LocalBufferPool,
    val file: PartitionFile,
    bufferRequestTimeoutMs: Long)
  extends ResultPartition(partitionId, ResultPartitionType.Blocking, numSubpartitions, bufferPool) {

  private val queues = Array.fill(numSubpartitions)(new java.util.ArrayDeque[BufferConsumer]())
  @volatile private var queued = 0
  @volatile private var spills = 0
  @volatile private var spillTimeNanos = 0L // written by the producer thread only

  override protected def requestBufferBuilder(subpartition: Int): BufferBuilder = {
    var buffer = bufferPool.requestBuffer()
    if (buffer == null) {
      spill(cutUnfinished = false)
      buffer = bufferPool.requestBuffer()
    }
    if (buffer == null) {
      // Every buffer of the pool is a partly written one: cut them short and spill those too.
      spill(cutUnfinished = true)
      buffer = bufferPool.requestBuffer()
    }
    if (buffer == null) buffer = whileBackPressured(bufferPool.requestBufferBlocking(bufferRequestTimeoutMs))
    new BufferBuilder(buffer)
  }

  /**
   * Writes every finished buffer to the file and returns it to the pool. With `cutUnfinished`,
   * the buffers still being written are finished first (a fuller buffer is not worth a stalled
   * producer).
   */
  private def spill(cutUnfinished: Boolean): Unit = {
    val start = System.nanoTime()
    var i = 0
    while (i < numSubpartitions) {
      if (cutUnfinished) finishBufferBuilder(i)
      val q = queues(i)
      while (!q.isEmpty && (q.peek().isFinished)) {
        val c = q.poll()
        queued -= 1
        val data = c.build()
        try file.write(i, data) finally { data.release(); c.close() }
      }
      i += 1
    }
    spills += 1
    spillTimeNanos += System.nanoTime() - start
  }

  override protected def addToSubpartition(subpartition: Int, consumer: BufferConsumer): Unit = {
    queues(subpartition).add(consumer)
    queued += 1
  }

  override protected def onBufferFinished(subpartition: Int): Unit = ()

  override protected def flushSubpartition(subpartition: Int): Unit = () // read only when complete

  override protected def onFinish(): Unit = {
    spill(cutUnfinished = true)
    val start = System.nanoTime()
    file.finishWriting()
    spillTimeNanos += System.nanoTime() - start
    bufferPool.lazyDestroy()
  }

  override protected def onRelease(cause: Throwable): Unit = {
    queues.foreach(q => while (!q.isEmpty) q.poll().close())
    queued = 0
    file.delete()
  }

  override def createSubpartitionView(start: Int, end: Int, listener: BufferAvailabilityListener): ResultSubpartitionView = {
    if (!isFinished) throw new IllegalStateException(s"$this is not complete yet; blocking partitions are read once finished")
    if (isReleased) throw new ProducerFailedException(partitionId, failureCause)
    if (start < 0 || end > numSubpartitions || start >= end) {
      throw new IndexOutOfBoundsException(s"$this has no subpartitions [$start, $end)")
    }
    val view = new BlockingSubpartitionView(this, start, end)
    listener.notifyDataAvailable()
    view
  }

  override def numQueuedBuffers: Int = queued

  /** Waiting for buffers plus compressing and writing spills (including the last, at finish). */
  override def blockedWriteTimeNanos: Long = super.blockedWriteTimeNanos + spillTimeNanos

  /** How many times the producer had to spill before finishing. */
  def numSpills: Int = spills

  /** Stored bytes of each subpartition: the sizes MapStatus reports. */
  def subpartitionSizes: Array[Long] = Array.tabulate(numSubpartitions)(file.storedBytes)
}

/**
 * One reader's cursor over subpartitions [start, end) of a finished [[BlockingResultPartition]]:
 * their spilled buffers in order, then the end of the partition. Reading never consumes anything,
 * so any number of views may read the same partition, at once or one after another.
 */
final class BlockingSubpartitionView private[partition] (partition: BlockingResultPartition, start: Int, end: Int)
  extends ResultSubpartitionView {

  private val file = partition.file
  private var current = start
  private var next = 0
  private var ended = false
  @volatile private var released = false

  private def skipDrained(): Unit =
    while (current < end && next >= file.numBuffers(current)) { current += 1; next = 0 }

  override def getNextBuffer(): BufferAndBacklog = {
    if (released || ended) return null
    if (partition.isReleased) { released = true; return null }
    skipDrained()
    if (current >= end) {
      ended = true
      BufferAndBacklog.endOfPartition(end - 1)
    } else {
      val b = file.buffer(current, next)
      next += 1
      BufferAndBacklog.spilled(b, current, backlog)
    }
  }

  override def isAvailable(credits: Int): Boolean = {
    if (released || partition.isReleased) return true
    if (ended) return false
    skipDrained()
    current >= end || credits > 0
  }

  override def backlog: Int = {
    var n = 0
    var s = current
    while (s < end) {
      n += file.numBuffers(s) - (if (s == current) next else 0)
      s += 1
    }
    n
  }

  override def releaseAllResources(): Unit = released = true

  override def isReleased: Boolean = released || partition.isReleased

  override def failureCause: Throwable = partition.failureCause
}
