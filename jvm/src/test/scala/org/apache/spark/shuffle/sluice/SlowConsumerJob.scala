package org.apache.spark.shuffle.sluice

import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.{GateInput, ProducerLocation}
import io.sluice.serialization.{RecordView, SpanningRecordDeserializer}
import org.apache.spark.{SparkContext, TaskContext}
import org.apache.spark.unsafe.Platform

/**
 * A real slow consumer inside Spark tasks, for the Spark-level backpressure tests until pipelined
 * shuffles (Real-Time Mode) run on Sluice: each task writes records into a Sluice pipelined
 * result partition of its executor, registered with the task's metric group, while a thread of the
 * same task reads them through a local input channel, pausing after every record. The task thread
 * really blocks on buffer requests (PipelinedSubpartition.awaitRoom / requestBufferBlocking), so
 * the backpressure monitor samples a genuinely backpressured stage. It is not a Spark shuffle:
 * no consumer stage exists. Called from Python through py4j (tests only).
 */
object SlowConsumerJob {

  /** Runs the job; returns the records the consumers read (numTasks x records). Blocks until done. */
  def run(sc: SparkContext, numTasks: Int, records: Int, recordBytes: Int, consumerPauseMs: Long): Long =
    sc.parallelize(0 until numTasks, numTasks).map(_ => produce(records, recordBytes, consumerPauseMs)).reduce(_ + _)

  private def produce(records: Int, recordBytes: Int, pauseMs: Long): Long = {
    val env = SluiceEnvironment.get()
    val ctx = TaskContext.get()
    val id = ResultPartitionID(Int.MaxValue - ctx.stageId(), ctx.taskAttemptId())
    val partition = env.createPipelinedPartition(id, 1)
    env.registerPartition(partition)
    SluiceTaskMetrics.group(env, ctx).foreach(_.attachPartition(partition))
    val gate = env.createInputGate(s"slow consumer of $id",
      IndexedSeq(GateInput(id, 0, 1, ProducerLocation(env.executorId, "localhost", 0))), waitForProducers = false)
    @volatile var read = 0L
    val consumer = new Thread(() => {
      val d = new SpanningRecordDeserializer
      val view = new RecordView
      var next = gate.getNext()
      while (next != null) {
        d.setNextBuffer(next.buffer)
        while (d.readNext(view) != SpanningRecordDeserializer.NeedMoreData) { read += 1; Thread.sleep(pauseMs) }
        next.buffer.release()
        next = gate.getNext()
      }
    }, s"slow consumer of $id")
    consumer.setDaemon(true)
    consumer.start()
    val bytes = new Array[Byte](recordBytes)
    try {
      (1 to records).foreach(_ => partition.emitRecord(0, bytes, Platform.BYTE_ARRAY_OFFSET, recordBytes))
      partition.finish()
      consumer.join()
    } finally gate.close()
    read
  }
}
