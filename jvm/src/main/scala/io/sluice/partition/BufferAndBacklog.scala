package io.sluice.partition

import io.netty.buffer.ByteBuf

/**
 * One unit handed out by a subpartition view: an in-memory buffer (a retained slice, owned by the
 * receiver, which releases it), a spilled buffer on disk, or the end of the partition. `backlog`
 * is the number of buffers ready in the view after this one (FLINK-11082: a buffer still being
 * written only counts once flushed), which the receiver uses to ask for floating buffers.
 */
final class BufferAndBacklog private (
    val buffer: ByteBuf,
    val spilled: SpilledBuffer,
    val subpartition: Int,
    val backlog: Int) {

  def isEndOfPartition: Boolean = buffer == null && spilled == null

  /** Size of the payload as it travels (compressed, for a compressed spilled buffer). */
  def size: Int = if (buffer != null) buffer.readableBytes() else if (spilled != null) spilled.storedLength else 0

  /** Releases the in-memory buffer, if any (a view being torn down). */
  def recycle(): Unit = if (buffer != null) buffer.release()

  override def toString: String =
    if (isEndOfPartition) s"EndOfPartition(subpartition $subpartition)"
    else s"BufferAndBacklog(subpartition $subpartition, $size bytes${if (spilled != null) " spilled" else ""}, backlog $backlog)"
}

object BufferAndBacklog {
  def inMemory(buffer: ByteBuf, subpartition: Int, backlog: Int): BufferAndBacklog =
    new BufferAndBacklog(buffer, null, subpartition, backlog)

  def spilled(buffer: SpilledBuffer, subpartition: Int, backlog: Int): BufferAndBacklog =
    new BufferAndBacklog(null, buffer, subpartition, backlog)

  def endOfPartition(subpartition: Int): BufferAndBacklog = new BufferAndBacklog(null, null, subpartition, 0)
}
