package io.sluice.netty

import java.io.IOException
import java.nio.ByteBuffer
import java.nio.channels.WritableByteChannel

import scala.util.control.NonFatal

import io.netty.channel.{ChannelFuture, ChannelFutureListener, ChannelPromise, FileRegion}
import io.netty.util.AbstractReferenceCounted

/**
 * The spilled payload of one BufferResponse on its way to the socket, guarding the connection
 * against its file (no Flink counterpart: Flink's FileRegionBuffer fails the whole connection).
 * Once a frame's header is on the wire its payload must follow, byte for byte, or every later frame
 * of the connection is misread. So when reading the file fails mid-way (the partition was released
 * and its file deleted, a per-reader file channel was closed, a disk error), the rest of the payload
 * goes out as zeros, the frame stays whole, and the write completes with an
 * [[UnreadablePayloadException]] that fails this buffer's reader only: the server sends its
 * receiver an ErrorResponse, and a receiver that looks at the zeros first finds that their CRC32C
 * does not match. A socket that is itself broken fails the zeros too, and that failure stays
 * connection-wide.
 *
 * Netty calls [[transferTo]] on the connection's event loop only; `promise` completes there.
 */
private[netty] final class GuardedFileRegion(inner: FileRegion, receiverId: InputChannelID, promise: ChannelPromise)
  extends AbstractReferenceCounted with FileRegion with ChannelFutureListener {

  private var done = 0L
  private var failure: Throwable = _

  override def position(): Long = 0L
  override def count(): Long = inner.count()
  override def transferred(): Long = done
  @deprecated("Netty's misspelt alias", "4.1") override def transfered(): Long = done

  override def transferTo(target: WritableByteChannel, position: Long): Long = {
    if (failure == null) {
      try {
        val n = inner.transferTo(target, done)
        if (n > 0) done += n
        return n
      } catch {
        case NonFatal(e) => failure = e // the file's fault or the socket's: the zeros will tell
      }
    }
    val zeros = GuardedFileRegion.Zeros.duplicate()
    zeros.limit(math.min(count() - done, zeros.capacity().toLong).toInt)
    val n = target.write(zeros) // throws when the socket is broken: that is connection-wide
    if (n > 0) done += n
    n
  }

  /** Whether the file failed and zeros went out instead. */
  def failed: Boolean = failure != null

  /** The write of this region completed: report a failed file to the BufferResponse's promise. */
  override def operationComplete(f: ChannelFuture): Unit =
    if (!f.isSuccess) promise.tryFailure(f.cause())
    else if (failure != null) promise.tryFailure(new UnreadablePayloadException(receiverId, failure, count()))
    else promise.trySuccess()

  override protected def deallocate(): Unit = inner.release()
  override def retain(): FileRegion = { super.retain(); this }
  override def retain(increment: Int): FileRegion = { super.retain(increment); this }
  override def touch(): FileRegion = this
  override def touch(hint: AnyRef): FileRegion = this
}

private[netty] object GuardedFileRegion {
  /** What replaces an unreadable payload; shared, never written to. */
  private val Zeros: ByteBuffer = ByteBuffer.allocateDirect(64 << 10).asReadOnlyBuffer()
}

/**
 * A spilled payload could not be read: its frame went out whole (its payload zeros) or not at all,
 * so the connection is intact and only the reader of `receiverId` fails.
 */
private[netty] final class UnreadablePayloadException(val receiverId: InputChannelID, cause: Throwable, bytes: Long)
  extends IOException(s"Could not read the $bytes-byte spilled buffer for receiver $receiverId: " +
    s"${cause.getClass.getSimpleName}: ${cause.getMessage}", cause)
