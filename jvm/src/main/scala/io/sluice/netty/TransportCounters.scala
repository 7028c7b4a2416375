package io.sluice.netty

import java.util.concurrent.atomic.{AtomicInteger, LongAdder}

/**
 * Counters of one executor's transport, for metrics and for the tests that check the flow-control
 * invariants: [[negativeCredits]] (a reader found its credit below zero) and [[creditOverruns]] (a
 * buffer arrived beyond the credit its channel announced) must stay zero. Thread-safe.
 */
final class TransportCounters {

  /** BufferResponses written by the server, and their payload bytes. */
  val buffersSent = new LongAdder
  val bytesSent = new LongAdder

  /** BufferResponses decoded by clients (discarded ones included), and their payload bytes. */
  val buffersReceived = new LongAdder
  val bytesReceived = new LongAdder

  /** Credit sent in AddCredit messages (initial credit travels in the PartitionRequest). */
  val creditAnnounced = new LongAdder
  val addCreditMessages = new LongAdder

  /** Connections closed because their bytes broke the protocol. */
  val protocolErrors = new LongAdder

  /** Times a credit-less connection stopped reading for want of a buffer. */
  val readStalls = new LongAdder

  /** Must stay 0: a server reader's credit went below zero. */
  val negativeCredits = new LongAdder

  /** Must stay 0: a channel received more buffers than it announced credit for. */
  val creditOverruns = new LongAdder

  /** Connections opened by this executor's client / accepted by its server (cumulative). */
  val connectionsOpened = new LongAdder
  val connectionsAccepted = new LongAdder

  /** Heartbeats: Pings sent by clients, Pongs the server answered with, Pongs clients received. */
  val pingsSent = new LongAdder
  val pongsSent = new LongAdder
  val pongsReceived = new LongAdder

  /** Client connections closed because their peer stayed silent past the heartbeat timeout. */
  val hungConnections = new LongAdder

  /** Spilled buffers the server could not read while sending them: only their reader failed. */
  val unreadablePayloads = new LongAdder

  /** Connections closed at once and partition requests refused because their peer held its maximum. */
  val connectionsRefused = new LongAdder
  val readersRefused = new LongAdder

  /** Upgraded (Sluice) server connections open now. */
  val activeServerConnections = new AtomicInteger

  /** Server readers (one per remote channel being served) alive now. */
  val activeReaders = new AtomicInteger

  override def toString: String =
    s"TransportCounters(sent=${buffersSent.sum}/${bytesSent.sum}b, received=${buffersReceived.sum}/${bytesReceived.sum}b, " +
      s"credit=${creditAnnounced.sum}, protocolErrors=${protocolErrors.sum}, stalls=${readStalls.sum}, " +
      s"negativeCredits=${negativeCredits.sum}, creditOverruns=${creditOverruns.sum}, opened=${connectionsOpened.sum}, " +
      s"accepted=${connectionsAccepted.sum}, pings=${pingsSent.sum}/${pongsSent.sum}/${pongsReceived.sum}, " +
      s"hung=${hungConnections.sum}, unreadable=${unreadablePayloads.sum}, " +
      s"refused=${connectionsRefused.sum}/${readersRefused.sum}, serverConnections=${activeServerConnections.get}, readers=${activeReaders.get})"
}
