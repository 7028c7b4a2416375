package org.apache.spark.shuffle.sluice

import org.apache.spark.ShuffleDependency
import org.apache.spark.shuffle.BaseShuffleHandle

/** A shuffle served by Sluice: the dependency travels with the handle to the executors. */
private[sluice] class SluiceShuffleHandle[K, V, C](shuffleId: Int, dependency: ShuffleDependency[K, V, C])
  extends BaseShuffleHandle[K, V, C](shuffleId, dependency)
