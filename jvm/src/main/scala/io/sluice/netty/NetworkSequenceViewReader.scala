package io.sluice.netty

import java.util.concurrent.atomic.AtomicBoolean

import io.sluice.partition.ResultPartitionManager

/**
 * The server's end of one remote input channel, as the [[PartitionRequestQueue]] drives it (Flink's
 * NetworkSequenceViewReader): the credit its receiver announced, whether it can send now, and the
 * next message. [[CreditBasedSequenceNumberingViewReader]] serves one partition's subpartitions,
 * [[CreditBasedUnionViewReader]] several partitions' in packed frames.
 *
 * Credit, sequence numbers and the availability flag belong to the connection's event loop;
 * availability notifications come from other threads and only hand the reader to the loop.
 */
private[netty] trait NetworkSequenceViewReader {

  def receiverId: InputChannelID

  /** Whether the reader sits in the queue's list of available readers (event loop). */
  private[netty] var registeredAsAvailable = false

  /** A hand-over to the event loop is pending; further notifications may be dropped. */
  private[netty] val notificationPending = new AtomicBoolean(false)

  /** Whether the writer could send something now: data within the credit, the end, or a failure. */
  def isAvailable: Boolean

  def addCredit(n: Int): Unit

  /** The next message for the receiver, or null when nothing is ready; throws the producer's failure. */
  def getNextMessage(counters: TransportCounters): NettyMessage

  /** The last message was handed out: the queue removes the reader once it is written. */
  def isFinished: Boolean

  /** Releases what the reader reads (the receiver cancelled, the connection closed, or the end went out). */
  def release(manager: ResultPartitionManager): Unit

  def isReleased: Boolean

  /** What the reader reads, for errors. */
  def describe: String
}
