package org.apache.spark.shuffle.sluice

import io.sluice.serialization.DataOutputSerializer
import io.sluice.writer.{RecordSerializer, SerializedRecord}
import org.apache.spark.serializer.{SerializationStream, Serializer, SerializerInstance}
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.unsafe.Platform
import org.apache.spark.util.AccumulatorV2

/**
 * Serialises Spark's shuffle records with the dependency's serializer, one record at a time, so
 * every record becomes one length-framed element of its subpartition. Three shapes:
 *  - SQL's UnsafeRowSerializer: the row's bytes already are the record; they are copied once,
 *    straight into the network buffer (no serialisation stream at all). The rows' sizes go into
 *    the exchange's `dataSize` metric, as the serializer's own stream would add them: AQE plans
 *    with it (see [[SparkInternals.unsafeRowDataSize]]).
 *  - serializers whose records may be relocated (Kryo with auto-reset): one stream, flushed after
 *    each record.
 *  - others (Java serialization): one stream per subpartition, because a stream's records refer
 *    to what the same stream wrote before; each subpartition's bytes form one stream.
 * Single-threaded (the map task).
 */
private[sluice] abstract class SparkRecordSerializer extends RecordSerializer[Product2[Any, Any]] {

  /** After the last record: reports what the serializer counted and closes its stream. */
  def close(): Unit = ()
}

private[sluice] object SparkRecordSerializer {

  def apply(serializer: Serializer, numSubpartitions: Int): SparkRecordSerializer =
    if (SparkInternals.unsafeRowFieldCount(serializer).isDefined) new UnsafeRows(SparkInternals.unsafeRowDataSize(serializer))
    else if (SparkInternals.supportsRelocation(serializer)) new SharedStream(serializer.newInstance())
    else new StreamPerSubpartition(serializer.newInstance(), numSubpartitions)

  private final class UnsafeRows(dataSize: Option[AccumulatorV2[Long, Long]]) extends SparkRecordSerializer {
    private var bytes = 0L
    override def serialize(record: Product2[Any, Any], subpartition: Int, target: SerializedRecord): Unit = {
      val row = record._2.asInstanceOf[UnsafeRow]
      val size = row.getSizeInBytes
      bytes += size
      target.point(row.getBaseObject, row.getBaseOffset, size)
    }
    override def close(): Unit = {
      dataSize.foreach(_.add(bytes))
      bytes = 0
    }
  }

  private final class SharedStream(instance: SerializerInstance) extends SparkRecordSerializer {
    private val bytes = new DataOutputSerializer()
    private val stream = instance.serializeStream(bytes)
    override def serialize(record: Product2[Any, Any], subpartition: Int, target: SerializedRecord): Unit = {
      bytes.clear()
      stream.writeKey(record._1)
      stream.writeValue(record._2)
      stream.flush()
      target.point(bytes.array, Platform.BYTE_ARRAY_OFFSET, bytes.length)
    }
    override def close(): Unit = stream.close()
  }

  private final class StreamPerSubpartition(instance: SerializerInstance, n: Int) extends SparkRecordSerializer {
    private val bytes = new DataOutputSerializer()
    private val streams = new Array[SerializationStream](n)
    override def serialize(record: Product2[Any, Any], subpartition: Int, target: SerializedRecord): Unit = {
      bytes.clear()
      var s = streams(subpartition)
      if (s == null) { s = instance.serializeStream(bytes); streams(subpartition) = s } // header goes with this record
      s.writeKey(record._1)
      s.writeValue(record._2)
      s.flush()
      target.point(bytes.array, Platform.BYTE_ARRAY_OFFSET, bytes.length)
    }
  }
}
