package io.sluice.partition

import java.io.IOException
import java.nio.channels.FileChannel
import java.nio.file.StandardOpenOption
import java.util.concurrent.atomic.AtomicInteger

import io.netty.buffer.ByteBuf

/**
 * One reader's read-only handle of a [[PartitionedFile]] (the file channels Flink's
 * PartitionedFileReader owns: the data's, and the index file's once a view reads its entries),
 * opened by [[PartitionedFileReader.open]], reference counted: the [[BlockingSubpartitionView]] that opened it
 * holds one reference until it has read its range or is released, and every read of one of its
 * buffers holds another while it reads; the channel is closed when the last goes.
 *
 * Reads are positional, so threads reading the same handle never share a position. A thread interrupted in a read closes this channel (Java NIO's interruptible
 * channels): this reader fails with ClosedByInterruptException, other readers of the file keep
 * their own channels. Thread-safe.
 */
final class PartitionedFileReader private[partition] (val file: PartitionedFile, channel: FileChannel) {

  private val refs = new AtomicInteger(1)
  private var indexChannel: FileChannel = _ // the file's index, opened on first use; guarded by this

  /** Takes another reference unless the reader was already closed; whether it did. */
  def tryRetain(): Boolean = {
    var n = refs.get()
    while (n > 0 && !refs.compareAndSet(n, n + 1)) n = refs.get()
    n > 0
  }

  /** Drops one reference; the last one closes the channel. */
  def release(): Unit = {
    val n = refs.decrementAndGet()
    if (n == 0) {
      try channel.close()
      finally closeIndex()
    } else if (n < 0) throw new IllegalStateException(s"$this was released once too often")
  }

  def refCnt: Int = math.max(0, refs.get())

  /** File descriptors this reader holds now: the data file's, and the index file's once opened (0 once closed). */
  def numDescriptors: Int = synchronized {
    if (refs.get() <= 0) 0 else 1 + (if (indexChannel != null) 1 else 0)
  }

  /** Copies `length` bytes at `offset` into `target` at its writer index, which it advances. */
  def read(offset: Long, length: Int, target: ByteBuf): Unit = {
    PartitionedFileReader.probe(file, "read")
    val bb = target.nioBuffer(target.writerIndex(), length)
    var pos = offset
    while (bb.hasRemaining) {
      val n = channel.read(bb, pos)
      if (n < 0) throw new IOException(s"${file.path} ends at $pos, before the buffer at $offset (+$length) is complete")
      pos += n
    }
    target.writerIndex(target.writerIndex() + length)
  }

  /**
   * The entries of subpartitions [start, end): kept in the heap, or from the file's index file
   * through a handle of the index this reader opens on first use (IOException once closed). `keepIndexOpen`: the handle
   * stays open for the next view (a reader the server's cache keeps), closed with the data's;
   * otherwise it is closed at once (a reader of one view, which reads its entries once).
   */
  def readIndexRange(start: Int, end: Int, keepIndexOpen: Boolean): PartitionedFileIndexRange =
    try file.readIndexRange(start, end, () => openIndex())
    finally if (!keepIndexOpen) closeIndex()

  private def openIndex(): FileChannel = synchronized {
    if (refs.get() <= 0) throw new IOException(s"$this is closed")
    if (indexChannel == null) indexChannel = FileChannel.open(file.indexPath.toPath, StandardOpenOption.READ)
    indexChannel
  }

  private def closeIndex(): Unit = synchronized {
    if (indexChannel != null) { indexChannel.close(); indexChannel = null }
  }

  override def toString: String = s"PartitionedFileReader(${file.path.getName}, refCnt=$refCnt)"
}

object PartitionedFileReader {

  /**
   * Opens a read-only handle of finished `file` for one reader (reference count 1). Fails with an
   * IOException when the file is not complete, was released, or cannot be opened; a file released
   * while the handle was being opened keeps no handle open.
   */
  def open(file: PartitionedFile): PartitionedFileReader = {
    file.checkReadable()
    probe(file, "open")
    val reader = new PartitionedFileReader(file, FileChannel.open(file.path.toPath, StandardOpenOption.READ))
    if (file.isDeleted) { reader.release(); file.checkReadable() } // released while opening: no handle stays
    reader
  }

  /**
   * Tests only: called on the calling thread before each open ("open") and read ("read") of a
   * partition file, to observe how often and on which threads files are opened and read.
   */
  @volatile private[sluice] var ioListener: (PartitionedFile, String) => Unit = _

  private def probe(file: PartitionedFile, what: String): Unit = {
    val l = ioListener
    if (l != null) l(file, what)
  }
}
