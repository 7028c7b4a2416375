package io.sluice.partition

/**
 * Names one result partition on its executor (Flink's ResultPartitionID): the output of one
 * producer of a shuffle. For blocking partitions the producer id is Spark's map task attempt id
 * (the `mapId` MapStatus reports); for pipelined partitions it is the map index, which consumers
 * know before any producer runs.
 */
final case class ResultPartitionID(shuffleId: Int, producerId: Long) {

  // The case class's own hash, computed once: the ids are looked up once per map output and reader.
  override val hashCode: Int = scala.util.hashing.MurmurHash3.caseClassHash(this)

  override def toString: String = s"shuffle $shuffleId producer $producerId"
}
