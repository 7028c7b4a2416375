package io.sluice.partition

/**
 * Names one result partition on its executor (Flink's ResultPartitionID): the output of one
 * producer of a shuffle. For blocking partitions the producer id is Spark's map task attempt id
 * (the `mapId` MapStatus reports); for pipelined partitions it is the map index, which consumers
 * know before any producer runs.
 */
final case class ResultPartitionID(shuffleId: Int, producerId: Long) {

  // Computed once and without boxing the fields: ids are made and looked up once per map output and reader.
  override val hashCode: Int = {
    import scala.util.hashing.MurmurHash3.{finalizeHash, mix, mixLast}
    finalizeHash(mixLast(mix(mix(0x5eed1ce, shuffleId), producerId.toInt), (producerId >>> 32).toInt), 3)
  }

  override def toString: String = s"shuffle $shuffleId producer $producerId"
}
