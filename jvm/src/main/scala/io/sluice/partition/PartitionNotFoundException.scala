package io.sluice.partition

/**
 * No partition with this id is registered here (never produced, lost, or already released).
 * `input`: its position in the request that named it (a MultiPartitionRequest's inputs), or -1;
 * `cause`: on the client, the server's report, whose message this one keeps.
 */
final class PartitionNotFoundException(val partitionId: ResultPartitionID, val input: Int = -1, cause: Throwable = null)
  extends java.io.IOException(
    s"Result partition ($partitionId) not found" +
      (if (input >= 0) s" (input $input of the request)" else "") +
      (if (cause != null) s": ${cause.getMessage}" else ""), cause)
