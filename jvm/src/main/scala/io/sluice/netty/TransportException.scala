package io.sluice.netty

import java.io.IOException

/**
 * Bytes that break Sluice's wire protocol: a bad frame, an unknown message id, a length that does
 * not fit, a buffer sent without credit, a message for a receiver the connection never had. The
 * connection that carried them is closed; nothing else is affected.
 */
final class TransportProtocolException(message: String, cause: Throwable) extends IOException(message, cause) {
  def this(message: String) = this(message, null)
}

/**
 * A failure reported by or about the other end of a connection (Flink's RemoteTransportException):
 * the connection was lost or could not be opened, or the remote server answered with an error.
 */
final class RemoteTransportException(message: String, cause: Throwable) extends IOException(message, cause) {
  def this(message: String) = this(message, null)
}

/**
 * A request refused because its peer (remote host) holds as much of the server as one host may
 * (spark.sluice.network.maxReadersPerPeer); the message names the host and the key.
 */
final class PeerLimitException(message: String) extends IOException(message)
