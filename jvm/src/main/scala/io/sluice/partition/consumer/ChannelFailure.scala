package io.sluice.partition.consumer

import java.io.IOException
import java.nio.channels.ClosedByInterruptException
import java.util.concurrent.TimeoutException

import io.sluice.netty.ResourceExhaustion

/**
 * How the gate sorts what a channel throws (Spark's split between a FetchFailedException and any
 * other task failure): a fetch failure (lost producer, missing partition, corrupt or unreadable
 * bytes, a broken connection, a timeout; all IOExceptions or TimeoutExceptions) becomes an
 * [[InputChannelException]], which the Spark layer reports as a FetchFailed so Spark recomputes
 * the map output; an interrupt (the task is being killed) an InterruptedException; anything else
 * is thrown as itself and fails the task, so Spark retries it without recomputing healthy map
 * outputs: an OutOfMemoryError, a bug in the reader, this process out of file descriptors
 * ([[ResourceExhaustion]], though Java reports it as an IOException), and a remote server failing
 * for a reason of its own or refusing ([[ServerFailureException]]). Stateless; any thread.
 */
private[consumer] object ChannelFailure {

  /** Whether `e` says the data could not be fetched, rather than that the reader or the server failed. */
  def isFetchFailure(e: Throwable): Boolean = e match {
    case _ if ResourceExhaustion(e) => false
    case _: IOException | _: TimeoutException => true
    case _ => false
  }

  /** What the task thread throws for `e`, thrown by reading `channel` of the gate `owner`. */
  def of(owner: String, channel: InputChannel, e: Throwable): Throwable = e match {
    case f: InputChannelException =>
      f.getCause match {
        case c if isFetchFailure(c) => interruptedOr(owner, f)
        case c => c // wrapped where it was caught (e.g. a local channel's read): not a fetch failure
      }
    case i: InterruptedException => i
    case f if isFetchFailure(f) => interruptedOr(owner, new InputChannelException(channel, f))
    case other => other
  }

  /**
   * An interrupt of the task thread (the task is killed) surfaces as an InterruptedException, not
   * as a channel failure: Spark must not report a FetchFailed, and so recompute a map output,
   * because it killed the reader.
   */
  private def interruptedOr(owner: String, e: InputChannelException): Throwable = e.getCause match {
    case i: InterruptedException => i
    case c: ClosedByInterruptException =>
      val i = new InterruptedException(s"$owner was interrupted while reading ${e.channel.description}")
      i.initCause(c)
      i
    case _ => e
  }
}
