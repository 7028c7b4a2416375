package org.apache.spark.shuffle.sluice

import java.io.ByteArrayOutputStream

import io.sluice.writer.SerializedRecord
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.execution.UnsafeRowSerializer
import org.apache.spark.sql.execution.metric.SQLMetric
import org.apache.spark.sql.types.{DataType, LongType, StringType}
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.funsuite.AnyFunSuite

/**
 * Serialising SQL rows for the shuffle: the exchange's `dataSize` metric, which AQE plans with
 * (an exchange's runtime size), must come out as Spark's own serializer stream makes it.
 */
class SparkRecordSerializerSuite extends AnyFunSuite {

  private def rows(n: Int): Seq[UnsafeRow] = {
    val project = UnsafeProjection.create(Array[DataType](LongType, StringType))
    (0 until n).map(i => project(InternalRow(i.toLong, UTF8String.fromString("x" * (i % 50)))).copy())
  }

  test("SQL rows add their sizes to the exchange's dataSize metric, as Spark's serializer stream does") {
    val input = rows(1000)
    val sluiceMetric = new SQLMetric("size", -1)
    val serializer = SparkRecordSerializer(new UnsafeRowSerializer(2, sluiceMetric), 8)
    val target = new SerializedRecord
    input.zipWithIndex.foreach { case (row, i) =>
      serializer.serialize((0, row), i % 8, target)
      assert(target.length == row.getSizeInBytes)
    }
    serializer.close()

    val sparkMetric = new SQLMetric("size", -1)
    val stream = new UnsafeRowSerializer(2, sparkMetric).newInstance().serializeStream(new ByteArrayOutputStream())
    input.foreach(row => stream.writeKey(0).writeValue(row))
    stream.close()

    assert(sparkMetric.value == input.map(_.getSizeInBytes.toLong).sum)
    assert(sluiceMetric.value == sparkMetric.value)
  }

  test("SQL rows decode into one reused pair and row, each holding the record just read") {
    val input = rows(100)
    val serializer = SparkRecordSerializer(new UnsafeRowSerializer(2), 1)
    val decoder = SparkRecordDecoder(new UnsafeRowSerializer(2), 1)
    val target = new SerializedRecord
    val view = new io.sluice.serialization.RecordView
    var first: Product2[Any, Any] = null
    input.foreach { row =>
      serializer.serialize((0, row), 0, target)
      view.base = target.base
      view.offset = target.offset
      view.length = target.length
      val pair = decoder.decode(0, view)
      if (first == null) first = pair
      assert(pair.asInstanceOf[AnyRef].eq(first.asInstanceOf[AnyRef]), "a pair allocated per record")
      assert(pair._1 == 0 && pair._2 == row)
    }
    serializer.close()
  }

  test("a serializer without the metric (outside SQL's exchanges) serialises all the same") {
    val serializer = SparkRecordSerializer(new UnsafeRowSerializer(2), 2)
    val target = new SerializedRecord
    rows(3).foreach { row =>
      serializer.serialize((0, row), 0, target)
      assert(target.base.eq(row.getBaseObject) && target.length == row.getSizeInBytes)
    }
    serializer.close()
  }
}
