package org.apache.spark.shuffle.sluice

import org.apache.spark.SparkEnv
import org.apache.spark.sql.Dataset
import org.apache.spark.sql.execution.exchange.ShuffleExchangeExec

/**
 * Test-only, called through py4j on the driver: what a SQL exchange hands its shuffle writer.
 * Spark SQL copies every row (a new row and a tuple per record) unless the shuffle manager is a
 * SortShuffleManager; otherwise the map side hands over one reused pair.
 */
object TestingRowCopyProbe {

  /** The class of the driver's shuffle manager for regular shuffles (the one the copy check asks). */
  def blockingShuffleManagerClass(): String = SparkEnv.get.blockingShuffleManager.getClass.getName

  /**
   * Runs the map side of the first exchange of `df`'s executed plan (AQE off) and returns
   * `classes|objects|records`: the class names of the records the writer would get, how many
   * distinct objects carried them, and how many records there were.
   */
  def recordsBeforeShuffle(df: Dataset[_]): String = {
    val plan = df.queryExecution.executedPlan
    val exchange = plan.collectFirst { case e: ShuffleExchangeExec => e }
      .getOrElse(throw new IllegalArgumentException(s"no ShuffleExchangeExec in $plan"))
    val perPartition = exchange.shuffleDependency.rdd.mapPartitions { records =>
      val seen = new java.util.IdentityHashMap[AnyRef, java.lang.Boolean]()
      val classes = scala.collection.mutable.Set.empty[String]
      var n = 0L
      records.foreach { r =>
        seen.put(r.asInstanceOf[AnyRef], java.lang.Boolean.TRUE)
        classes += r.getClass.getName
        n += 1
      }
      Iterator((classes.toSet, seen.size.toLong, n))
    }.collect()
    val classes = perPartition.flatMap(_._1).toSet.toSeq.sorted.mkString(",")
    s"$classes|${perPartition.map(_._2).sum}|${perPartition.map(_._3).sum}"
  }
}
