package io.sluice

import java.nio.file.Files

import scala.collection.mutable.ArrayBuffer

import io.sluice.config.SluiceConf
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.{GateInput, ProducerLocation, SingleInputGate}
import io.sluice.serialization.{RecordView, SpanningRecordDeserializer}
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.unsafe.Platform

/** Small shuffle environments for engine tests: 4 KiB segments, 1 MiB of network memory, a temp dir. */
object TestingShuffleEnvironment {

  val ExecutorId = "exec-1"
  val Local: ProducerLocation = ProducerLocation(ExecutorId, "localhost", 0)

  def apply(settings: (String, String)*): ShuffleEnvironment = {
    val dir = Files.createTempDirectory("sluice-test").toFile
    dir.deleteOnExit()
    val conf = SluiceConf(Seq("spark.sluice.memory.segmentSize" -> "4k", "spark.sluice.network.memory" -> "1m") ++ settings)
    new ShuffleEnvironment(conf, ExecutorId, Seq(dir), None, TransportSettings.plain(SparkInternals.TransportPipeline))
  }

  def withEnvironment[T](settings: (String, String)*)(body: ShuffleEnvironment => T): T = {
    val env = apply(settings: _*)
    try body(env)
    finally env.shutdown()
  }

  /** A gate over one subpartition of each of `partitions` (all local). */
  def gate(env: ShuffleEnvironment, subpartition: Int, partitions: ResultPartitionID*): SingleInputGate =
    env.createInputGate("test reader", partitions.map(id => GateInput(id, subpartition, subpartition + 1, Local)).toIndexedSeq,
      waitForProducers = false)

  def record(length: Int, fill: Byte = 7): Array[Byte] = Array.fill(length)(fill)

  /** What a reader saw: record lengths and latency markers (createdAt, stage, index). */
  final case class Read(records: Seq[Int], markers: Seq[(Long, Int, Int)])

  /**
   * Reads the gate to its end, calling `onRecord` / `onMarker` as the task thread would: one
   * deserialiser per input, as the Spark layer's reader keeps (a packed channel carries many).
   */
  def drain(g: SingleInputGate, onRecord: () => Unit = () => (),
      onMarker: (Long, Int, Int) => Unit = (_, _, _) => ()): Read = {
    val deserializers = Array.fill(g.numberOfInputs)(new SpanningRecordDeserializer)
    val view = new RecordView
    val records = ArrayBuffer.empty[Int]
    val markers = ArrayBuffer.empty[(Long, Int, Int)]
    var next = g.getNext()
    while (next != null) {
      val d = deserializers(next.input)
      d.setNextBuffer(next.buffer)
      var kind = d.readNext(view)
      while (kind != SpanningRecordDeserializer.NeedMoreData) {
        if (kind == SpanningRecordDeserializer.Record) { records += view.length; onRecord() }
        else {
          markers += ((view.markerCreatedAtMillis, view.markerProducerStage, view.markerProducerIndex))
          onMarker(view.markerCreatedAtMillis, view.markerProducerStage, view.markerProducerIndex)
        }
        kind = d.readNext(view)
      }
      next.buffer.release()
      next = g.getNext()
    }
    Read(records.toSeq, markers.toSeq)
  }

  val ByteArrayOffset: Long = Platform.BYTE_ARRAY_OFFSET.toLong
}
