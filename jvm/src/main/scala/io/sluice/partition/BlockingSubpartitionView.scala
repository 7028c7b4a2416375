package io.sluice.partition

import java.util.concurrent.atomic.AtomicReference

/**
 * One reader's cursor over subpartitions [start, end) of a finished [[SortMergeResultPartition]]
 * (Flink's SortMergeSubpartitionReader): their buffers in file order, region after region, then
 * the end of the partition. Reading never consumes anything, so any number of views may read the
 * same partition, at once or one after another.
 *
 * The view takes a [[PartitionFileReader]] on its first buffer (the server's kept one when it
 * reads for a remote consumer, through `readers`, else one of its own) and drops it when it hands
 * out the end, sees the partition released, or is released itself; FileRegions still being sent
 * keep the handle open until Netty is done with them. A read error (file gone, I/O error) is
 * thrown to this view's consumer only. Used by one thread at a time; [[releaseAllResources]] may
 * come from another.
 */
final class BlockingSubpartitionView private[partition] (
    partition: SortMergeResultPartition,
    start: Int,
    end: Int,
    readers: Option[PartitionFileReaderCache])
  extends ResultSubpartitionView {

  private val file = partition.file
  private var current = start
  private var nextBuffer = file.firstBuffer(start) // number of the next buffer of `current`, -1: none left
  private var remaining = file.numBuffers(start, end)
  private var ended = false
  @volatile private var released = false
  private val reader = new AtomicReference[PartitionFileReader]()

  private def skipDrained(): Unit =
    while (nextBuffer < 0 && current < end) {
      current += 1
      if (current < end) nextBuffer = file.firstBuffer(current)
    }

  override def getNextBuffer(): BufferAndBacklog = {
    if (released || ended) return null
    if (partition.isReleased) { released = true; closeReader(); return null }
    skipDrained()
    if (current >= end) {
      ended = true
      closeReader()
      BufferAndBacklog.endOfPartition(end - 1)
    } else {
      val r =
        try openReader()
        catch {
          // Released while opening: the consumer learns it as a release, not as a missing file.
          case _: java.io.IOException if partition.isReleased => released = true; return null
        }
      val b = file.spilledBuffer(nextBuffer, r)
      nextBuffer = file.nextBuffer(nextBuffer)
      remaining -= 1
      BufferAndBacklog.spilled(b, current, remaining)
    }
  }

  /** This view's handle of the file, opened on first use (IOException when it cannot be). */
  private def openReader(): PartitionFileReader = {
    val r = reader.get()
    if (r != null) r
    else {
      val opened = readers match {
        case Some(cache) => cache.acquire(file)
        case None => PartitionFileReader.open(file)
      }
      reader.set(opened)
      if (released) closeReader() // released meanwhile: the buffer is still readable through a handle of its own
      opened
    }
  }

  private def closeReader(): Unit = {
    val r = reader.getAndSet(null)
    if (r != null) r.release()
  }

  override def isAvailable(credits: Int): Boolean = {
    if (released || partition.isReleased) return true
    if (ended) return false
    skipDrained()
    current >= end || credits > 0
  }

  override def backlog: Int = remaining

  override def releaseAllResources(): Unit = {
    released = true
    closeReader()
  }

  override def isReleased: Boolean = released || partition.isReleased

  override def failureCause: Throwable = partition.failureCause

  /** Whether the view holds a handle of the file now (tests). */
  private[partition] def hasOpenReader: Boolean = reader.get() != null
}
