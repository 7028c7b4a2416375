package io.sluice.partition

import java.util.concurrent.atomic.AtomicReference

/**
 * One reader's cursor over subpartitions [start, end) of a finished [[SortMergeResultPartition]]
 * (Flink's SortMergeSubpartitionReader): their buffers in the order written, subpartition after
 * subpartition, then the end of the partition. Reading never consumes anything, so any number of
 * views may read the same partition, at once or one after another.
 *
 * The view takes a [[PartitionedFileReader]] on its first buffer (the server's kept one when it
 * reads for a remote consumer, through `readers`, else one of its own), reads the range's entries
 * of the file's index through it ([[PartitionedFileIndexRange]]), and drops both when it hands out
 * the end, sees the partition released, or is released itself; a buffer it handed out still reads
 * through the handle while a read holds it, else through one of its own. A read error (file gone, I/O error) is thrown to
 * this view's consumer only. Used by one thread at a time; [[releaseAllResources]] may come from
 * another.
 */
final class BlockingSubpartitionView private[partition] (
    partition: SortMergeResultPartition,
    start: Int,
    end: Int,
    readers: Option[PartitionedFileReaderCache])
  extends ResultSubpartitionView {

  private val file = partition.file
  private var entries: PartitionedFileIndexRange = _ // the range's index entries, read with the file's reader
  private var next = 0 // the next entry of `entries` to hand out
  private var current = start // the subpartition of the entry handed out last
  private var ended = false
  private var bytesLeft = 0L // stored bytes of the entries not handed out yet, once `entries` are read
  @volatile private var released = false
  private val reader = new AtomicReference[PartitionedFileReader]()

  override def getNextBuffer(): BufferAndBacklog = {
    if (released || ended) return null
    if (partition.isReleased) { released = true; closeReader(); return null }
    val r =
      try openReader()
      catch {
        // Released while opening: the consumer learns it as a release, not as a missing file.
        case _: java.io.IOException if partition.isReleased => released = true; return null
      }
    if (next >= entries.size) {
      ended = true
      entries = null
      closeReader()
      BufferAndBacklog.endOfPartition(end - 1)
    } else {
      val b = file.spilledBuffer(entries, next, r)
      current = entries.subpartitionOf(next, current)
      next += 1
      bytesLeft -= b.storedLength
      BufferAndBacklog.spilled(b, current, entries.size - next)
    }
  }

  /**
   * This view's handle of the file, opened on first use together with the range's index entries
   * (IOException when either cannot be read).
   */
  private def openReader(): PartitionedFileReader = {
    val r = reader.get()
    if (r != null) r
    else {
      val opened = readers match {
        case Some(cache) => cache.acquire(file)
        case None => PartitionedFileReader.open(file)
      }
      try entries = opened.readIndexRange(start, end, keepIndexOpen = readers.isDefined)
      catch { case e: Throwable => opened.release(); throw e }
      var i = 0
      while (i < entries.size) { bytesLeft += entries.storedLength(i); i += 1 }
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
    if (credits > 0) return true
    // Without credit only the end can go: whether it is next needs the range's entries.
    try openReader()
    catch { case _: java.io.IOException => return true } // getNextBuffer reports it
    next >= entries.size
  }

  /**
   * Buffers not handed out yet. Asked before the first buffer (a union view sums its inputs'),
   * it reads the count from the index file's directory without opening the data file.
   */
  override def backlog: Int =
    if (entries != null) entries.size - next
    else if (ended || released || next > 0) 0
    else
      try file.numBuffers(start, end)
      catch { case _: java.io.IOException => 0 } // released or unreadable: getNextBuffer reports it

  /**
   * Where in the file the next read goes: the next buffer's offset, 0 before the range's entries
   * were read (a read scheduler orders reads by it).
   */
  def nextOffset: Long = { val e = entries; if (e != null && next < e.size) e.offset(next) else 0L }

  /** Stored bytes not handed out yet; -1 before the range's entries were read. */
  def remainingBytes: Long = if (entries != null) bytesLeft else if (ended || released) 0L else -1L

  override def releaseAllResources(): Unit = {
    released = true
    closeReader()
  }

  override def isReleased: Boolean = released || partition.isReleased

  override def failureCause: Throwable = partition.failureCause

  /** Whether the view holds a handle of the file now (tests). */
  private[partition] def hasOpenReader: Boolean = reader.get() != null
}
