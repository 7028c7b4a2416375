package org.apache.spark.shuffle.sluice

import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.{Aggregator, InterruptibleIterator, ShuffleDependency, TaskContext}

/**
 * What a reduce task does with the records it read, exactly as Spark's own shuffle reader does:
 * with a key ordering, sort (aggregating inside the sorter); otherwise aggregate when the
 * dependency has an aggregator (combiners when the map side already combined); otherwise pass the
 * records through. Spills through Spark's ExternalSorter ([[SparkInternals.sortAndCombine]]) /
 * ExternalAppendOnlyMap.
 */
private[sluice] object ReadSideCombine {

  def apply[K, C](dep: ShuffleDependency[_, _, _], context: TaskContext,
      records: Iterator[Product2[Any, Any]]): Iterator[Product2[K, C]] = {
    val interruptible = new InterruptibleIterator[Product2[Any, Any]](context, records)
    val result: Iterator[Product2[Any, Any]] = dep.keyOrdering match {
      case Some(ordering) =>
        val agg = dep.aggregator.map { a =>
          val merge = a.mergeCombiners.asInstanceOf[(Any, Any) => Any]
          if (dep.mapSideCombine) new Aggregator[Any, Any, Any](identity, merge, merge)
          else a.asInstanceOf[Aggregator[Any, Any, Any]]
        }
        SparkInternals.sortAndCombine(context, agg, ordering.asInstanceOf[Ordering[Any]], dep.serializer, interruptible)
      case None if dep.aggregator.isDefined =>
        val agg = dep.aggregator.get.asInstanceOf[Aggregator[Any, Any, Any]]
        if (dep.mapSideCombine) agg.combineCombinersByKey(interruptible, context)
        else agg.combineValuesByKey(interruptible, context)
      case None => interruptible
    }
    (result match {
      case i: InterruptibleIterator[_] => i
      case r => new InterruptibleIterator[Product2[Any, Any]](context, r)
    }).asInstanceOf[Iterator[Product2[K, C]]]
  }
}
