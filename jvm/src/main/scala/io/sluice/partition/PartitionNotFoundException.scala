package io.sluice.partition

/** No partition with this id is registered here (never produced, lost, or already released). */
final class PartitionNotFoundException(val partitionId: ResultPartitionID)
  extends java.io.IOException(s"Result partition ($partitionId) not found")
