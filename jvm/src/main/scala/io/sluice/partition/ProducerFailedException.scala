package io.sluice.partition

/** The producer of a partition failed or was released before it finished; carries the cause. */
final class ProducerFailedException(val partitionId: ResultPartitionID, cause: Throwable)
  extends java.io.IOException(s"Producer of result partition ($partitionId) failed: " +
      Option(cause).map(c => s"${c.getClass.getName}: ${c.getMessage}").getOrElse("released"), cause)
