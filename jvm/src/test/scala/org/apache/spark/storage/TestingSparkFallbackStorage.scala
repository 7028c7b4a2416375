package org.apache.spark.storage

import org.apache.spark.SparkEnv
import org.apache.spark.shuffle.ShuffleBlockInfo

/**
 * Spark's own FallbackStorage.copy, the call its BlockManagerDecommissioner makes when it hands a
 * map output to the fallback storage, for Sluice's tests (the class is private to this package).
 */
object TestingSparkFallbackStorage {

  /** Has this JVM's BlockManager copy map output `mapId` of `shuffleId` to the fallback storage, as Spark does. */
  def copy(shuffleId: Int, mapId: Long): Unit =
    new FallbackStorage(SparkEnv.get.conf).copy(ShuffleBlockInfo(shuffleId, mapId), SparkEnv.get.blockManager)
}
