package org.apache.spark.shuffle.sluice

import io.sluice.ShuffleEnvironment
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.ProducerLocation
import org.apache.spark.{Aggregator, InterruptibleIterator, TaskContext}
import org.apache.spark.internal.Logging
import org.apache.spark.shuffle.{ShuffleReadMetricsReporter, ShuffleReader}
import org.apache.spark.storage.{BlockManagerId, ShuffleBlockId}
import org.apache.spark.util.collection.ExternalSorter

/**
 * Reads reduce partitions [startPartition, endPartition) of the map outputs with map indexes
 * [startMapIndex, endMapIndex) (AQE's coalescing, skew splitting and local shuffle reader ask for
 * such ranges): one input channel per map output, local when the output is on this executor,
 * remote otherwise; then the dependency's aggregator and key ordering, as Spark's own reader
 * applies them. A failed channel surfaces as a FetchFailedException for its map output.
 */
private[sluice] final class SluiceShuffleReader[K, C](
    handle: SluiceShuffleHandle[K, _, C],
    startMapIndex: Int,
    endMapIndex: Int,
    startPartition: Int,
    endPartition: Int,
    context: TaskContext,
    readMetrics: ShuffleReadMetricsReporter,
    env: => ShuffleEnvironment) extends ShuffleReader[K, C] with Logging {

  private val dep = handle.dependency

  override def read(): Iterator[Product2[K, C]] = {
    val outputs = mapOutputs()
    val records: Iterator[Product2[Any, Any]] =
      if (outputs.isEmpty) Iterator.empty
      else {
        val owner = s"shuffle ${dep.shuffleId} reduce [$startPartition, $endPartition) of task ${context.taskAttemptId()}"
        val inputs = outputs.map(o => (ResultPartitionID(dep.shuffleId, o.mapId), o.startPartition, o.endPartition, o.producer))
        val environment = env
        val group = SluiceTaskMetrics.group(environment, context)
        val gate = environment.createInputGate(owner, inputs, waitForProducers = false)
        group.foreach(_.attachInputGate(gate))
        val iterator = new SluiceRecordIterator(gate, outputs, dep.shuffleId,
          SparkRecordDecoder(dep.serializer, outputs.size), context, readMetrics,
          group.map(_.numRecordsIn), SluiceTaskMetrics.latencyStats(environment, context, group))
        context.addTaskCompletionListener[Unit](_ => iterator.close())
        iterator
      }
    val interruptible = new InterruptibleIterator[Product2[Any, Any]](context, records)
    val result: Iterator[Product2[Any, Any]] = dep.keyOrdering match {
      case Some(ordering) =>
        val agg = dep.aggregator.map { a =>
          if (dep.mapSideCombine) new Aggregator[Any, Any, Any](identity, a.mergeCombiners.asInstanceOf[(Any, Any) => Any],
            a.mergeCombiners.asInstanceOf[(Any, Any) => Any])
          else a.asInstanceOf[Aggregator[Any, Any, Any]]
        }
        val sorter = new ExternalSorter[Any, Any, Any](context, aggregator = agg, partitioner = None,
          ordering = Some(ordering.asInstanceOf[Ordering[Any]]), serializer = dep.serializer)
        sorter.insertAllAndUpdateMetrics(interruptible)
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

  /**
   * The map outputs this reader needs, from Spark's MapOutputTracker: one entry per map output
   * with data in the range (Spark leaves out blocks of size 0), covering the reduce partitions
   * that have data.
   */
  private def mapOutputs(): IndexedSeq[MapOutput] = {
    val byMap = scala.collection.mutable.LinkedHashMap.empty[Long, MapOutput]
    SparkInternals.mapSizesByExecutorId(dep.shuffleId, startMapIndex, endMapIndex, startPartition, endPartition)
      .foreach { case (location, blocks) =>
        blocks.foreach {
          case (ShuffleBlockId(_, mapId, reduceId), size, mapIndex) if size > 0 =>
            val prev = byMap.get(mapId)
            byMap(mapId) = prev match {
              case Some(o) => o.copy(startPartition = math.min(o.startPartition, reduceId),
                endPartition = math.max(o.endPartition, reduceId + 1))
              case None => MapOutput(location, mapId, mapIndex, reduceId, reduceId + 1)
            }
          case _ =>
        }
      }
    byMap.values.toIndexedSeq
  }
}

/** One map output a reader reads: where it is and which of its reduce partitions hold data. */
private[sluice] final case class MapOutput(location: BlockManagerId, mapId: Long, mapIndex: Int,
    startPartition: Int, endPartition: Int) {
  def producer: ProducerLocation = ProducerLocation(location.executorId, location.host, SluiceLocation.port(location))
}
