package org.apache.spark.shuffle.sluice

import org.apache.spark.{MapOutputTrackerMaster, ShuffleDependency, SparkEnv}
import org.apache.spark.rdd.RDD

/**
 * For Spark-level tests, through py4j (the test jar is on the driver's classpath): runs the map
 * stage of an RDD's shuffle alone, and says where the driver's MapOutputTracker has each map
 * output. py4j cannot call SparkEnv's methods itself (looking them up loads classes pyspark does
 * not ship), hence this helper.
 */
object TestingMapOutputs {

  /** Runs the map stage of the nearest shuffle in `rdd`'s lineage and returns its shuffle id. */
  def runMapStage(rdd: RDD[_]): Int = {
    var r: RDD[_] = rdd
    var dep: ShuffleDependency[_, _, _] = null
    while (dep == null) {
      r.dependencies.headOption match {
        case Some(s: ShuffleDependency[_, _, _]) => dep = s
        case Some(d) => r = d.rdd
        case None => throw new IllegalArgumentException(s"$rdd depends on no shuffle")
      }
    }
    rdd.sparkContext.submitMapStage(dep).get()
    dep.shuffleId
  }

  /** Each map output of `shuffleId` as "mapId executorId topologyInfo" ("-" for a missing one), one a line. */
  def locations(shuffleId: Int): String = {
    val tracker = SparkEnv.get.mapOutputTracker.asInstanceOf[MapOutputTrackerMaster]
    val status = tracker.shuffleStatuses.getOrElse(shuffleId, throw new IllegalArgumentException(s"no shuffle $shuffleId"))
    status.withMapStatuses(_.map { s =>
      if (s == null) "-" else s"${s.mapId} ${s.location.executorId} ${s.location.topologyInfo.getOrElse("")}"
    }.mkString("\n"))
  }
}
