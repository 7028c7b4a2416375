package io.sluice.netty

import java.io.IOException

/**
 * A stored payload could not be opened or read by the read thread building its frame: nothing of
 * the frame was sent, so the connection is intact and only the reader of `receiverId` fails.
 */
private[netty] final class UnreadablePayloadException(val receiverId: InputChannelID, cause: Throwable, bytes: Long)
  extends IOException(s"Could not read the $bytes-byte spilled buffer for receiver $receiverId: " +
      s"${cause.getClass.getSimpleName}: ${cause.getMessage}", cause)
