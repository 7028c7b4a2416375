package org.apache.spark.shuffle.sluice

import io.sluice.ShuffleEnvironment
import io.sluice.config.SluiceOptions
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.{GateInput, ProducerLocation}
import io.sluice.serialization.SpanningRecordBudget
import org.apache.spark.TaskContext
import org.apache.spark.internal.Logging
import org.apache.spark.shuffle.sluice.internal.{SluiceLocation, SparkInternals}
import org.apache.spark.shuffle.sluice.metrics.SluiceTaskMetrics
import org.apache.spark.shuffle.sluice.rpc.PipelinedProducerDirectory
import org.apache.spark.shuffle.{ShuffleReadMetricsReporter, ShuffleReader}
import org.apache.spark.storage.{BlockManagerId, ShuffleBlockId}

/**
 * Reads reduce partitions [startPartition, endPartition) of the map outputs with map indexes
 * [startMapIndex, endMapIndex) (AQE's coalescing, skew splitting and local shuffle reader ask for
 * such ranges) through one input gate: one channel per executor holding any of those map
 * outputs (a packed remote channel per other executor, one local channel for this executor's),
 * each carrying every output of its executor. Then [[ReadSideCombine]] applies the dependency's
 * aggregator and key ordering. A failed channel surfaces as a FetchFailedException for the map
 * output it was reading.
 *
 * Regular shuffles find their map outputs in Spark's MapOutputTracker (only outputs with data in
 * the range). Pipelined shuffles have no map outputs yet when their readers start: the readers
 * learn where the producers run from the [[PipelinedProducerDirectory]] and their channels wait
 * for the producers' partitions.
 */
private[sluice] final class SluiceShuffleReader[K, C](
    handle: SluiceShuffleHandle[K, _, C],
    startMapIndex: Int,
    endMapIndex: Int,
    startPartition: Int,
    endPartition: Int,
    context: TaskContext,
    readMetrics: ShuffleReadMetricsReporter,
    env: => ShuffleEnvironment,
    pipelined: Boolean) extends ShuffleReader[K, C] with Logging {

  private val dep = handle.dependency

  override def read(): Iterator[Product2[K, C]] = {
    val outputs = if (pipelined) pipelinedOutputs() else mapOutputs()
    val records: Iterator[Product2[Any, Any]] =
      if (outputs.isEmpty) Iterator.empty
      else {
        val owner = s"shuffle ${dep.shuffleId} reduce [$startPartition, $endPartition) of task ${context.taskAttemptId()}"
        val inputs = outputs.map(o => GateInput(o.partitionId(dep.shuffleId), o.startPartition, o.endPartition, o.producer))
        val environment = env
        val group = SluiceTaskMetrics.group(environment, context)
        val gate = environment.createInputGate(owner, inputs, waitForProducers = pipelined)
        group.foreach(_.attachInputGate(gate))
        val spanning = new SpanningRecordBudget(environment.conf.get(SluiceOptions.RecordSpillThreshold),
          () => environment.recordSpillFile())
        val iterator = new SluiceRecordIterator(gate, outputs, dep.shuffleId,
          SparkRecordDecoder(dep.serializer, outputs.size), context, readMetrics,
          group.map(_.numRecordsIn), SluiceTaskMetrics.latencyStats(environment, context, group), spanning)
        context.addTaskCompletionListener[Unit](_ => iterator.close())
        iterator
      }
    ReadSideCombine[K, C](dep, context, records)
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
            byMap(mapId) = byMap.get(mapId) match {
              case Some(o) => o.copy(startPartition = math.min(o.startPartition, reduceId),
                  endPartition = math.max(o.endPartition, reduceId + 1))
              case None => MapOutput(location, mapId, mapIndex, reduceId, reduceId + 1, pipelined = false)
            }
          case _ =>
        }
      }
    byMap.values.toIndexedSeq
  }

  /**
   * One channel per producer and reduce partition of a pipelined shuffle (a pipelined subpartition
   * is read by exactly one channel), once the directory knows where every producer runs.
   */
  private def pipelinedOutputs(): IndexedSeq[MapOutput] = {
    val numMaps = handle.numMaps
    val producers = PipelinedProducerDirectory.awaitProducers(dep.shuffleId, numMaps,
      env.conf.get(SluiceOptions.RequestTimeout))
    for {
      mapIndex <- startMapIndex until math.min(endMapIndex, numMaps)
      reduce <- startPartition until endPartition
    } yield MapOutput(producers(mapIndex), mapIndex.toLong, mapIndex, reduce, reduce + 1, pipelined = true)
  }
}

/**
 * One map output a reader reads: where it is (a blocking output's MapStatus location, or the
 * location a pipelined producer announced, both with the Sluice port in their topology info) and
 * which of its reduce partitions it reads.
 */
private[sluice] final case class MapOutput(location: BlockManagerId, mapId: Long, mapIndex: Int,
    startPartition: Int, endPartition: Int, pipelined: Boolean) {

  def producer: ProducerLocation = SluiceLocation.producer(location)

  /** Blocking partitions are named by the map task attempt, pipelined ones by the map index. */
  def partitionId(shuffleId: Int): ResultPartitionID =
    ResultPartitionID(shuffleId, if (pipelined) mapIndex.toLong else mapId)
}
