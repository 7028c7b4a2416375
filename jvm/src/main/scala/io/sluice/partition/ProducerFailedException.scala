package io.sluice.partition

/**
 * The producer of a partition failed or was released before it finished; carries the cause.
 * `input`: the partition's position in the request that named it (a MultiPartitionRequest's
 * inputs), or -1.
 */
final class ProducerFailedException(val partitionId: ResultPartitionID, cause: Throwable, val input: Int = -1)
  extends java.io.IOException(
    s"Producer of result partition ($partitionId) failed" +
      (if (input >= 0) s" (input $input of the request)" else "") + ": " +
      Option(cause).map(c => s"${c.getClass.getName}: ${c.getMessage}").getOrElse("released"), cause)
