package org.apache.spark.shuffle.sluice

import org.apache.spark.ShuffleDependency
import org.apache.spark.shuffle.BaseShuffleHandle

/**
 * A shuffle served by Sluice: the dependency travels with the handle to the executors, and so
 * does the number of map tasks, which pipelined readers need before any map output exists.
 */
private[sluice] class SluiceShuffleHandle[K, V, C](shuffleId: Int, dependency: ShuffleDependency[K, V, C],
    val numMaps: Int) extends BaseShuffleHandle[K, V, C](shuffleId, dependency)
