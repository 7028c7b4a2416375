package org.apache.spark.shuffle.sluice

import java.io.InputStream

import io.sluice.serialization.{DataOutputSerializer, RecordView}
import org.apache.spark.serializer.{DeserializationStream, Serializer, SerializerInstance}
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.unsafe.Platform

/**
 * The reading half of [[SparkRecordSerializer]]: turns one framed record of an input (a map output) back into
 * a (key, value) pair with the dependency's serializer. Single-threaded (the reduce task).
 */
private[sluice] abstract class SparkRecordDecoder {

  def decode(input: Int, record: RecordView): Product2[Any, Any]

  /** The input moved on to another subpartition: a new serialisation stream starts there. */
  def startStream(input: Int): Unit = ()

  /** The input ended: whatever the decoder keeps for it goes. */
  def endInput(input: Int): Unit = ()

  /** Inputs the decoder keeps a stream open for (tests). */
  def numLiveStreams: Int = 0
}

private[sluice] object SparkRecordDecoder {

  def apply(serializer: Serializer, numChannels: Int): SparkRecordDecoder =
    SparkInternals.unsafeRowFieldCount(serializer) match {
      case Some(fields) => new UnsafeRows(fields)
      case None if SparkInternals.supportsRelocation(serializer) => new SharedStream(serializer.newInstance())
      case None => new StreamPerChannel(serializer.newInstance(), numChannels)
    }

  /**
   * Copies each row into one reused array, as Spark's own UnsafeRowSerializer does, and returns
   * the same `(0, row)` pair every time: Spark's row is reused already, so a consumer that kept
   * the pair past the next record would see the next row either way. No allocation per record.
   */
  private final class UnsafeRows(numFields: Int) extends SparkRecordDecoder {
    private var bytes = new Array[Byte](256)
    private val row = new UnsafeRow(numFields)
    private val pair: Product2[Any, Any] = (0, row)
    override def decode(input: Int, record: RecordView): Product2[Any, Any] = {
      val n = record.length
      if (bytes.length < n) bytes = new Array[Byte](math.max(n, bytes.length * 2))
      Platform.copyMemory(record.base, record.offset, bytes, Platform.BYTE_ARRAY_OFFSET, n)
      row.pointTo(bytes, Platform.BYTE_ARRAY_OFFSET, n)
      pair
    }
  }

  private final class SharedStream(instance: SerializerInstance) extends SparkRecordDecoder {
    private val in = new RecordInputStream
    private val stream = instance.deserializeStream(in)
    override def decode(input: Int, record: RecordView): Product2[Any, Any] = {
      in.set(record)
      val k = stream.readKey[Any]()
      val v = stream.readValue[Any]()
      (k, v)
    }
  }

  /**
   * One deserialisation stream per input being read, opened at the input's first record and
   * closed when the input moves to another subpartition or ends (a serializer that cannot read
   * its records apart, e.g. Java serialization, keeps state across the records of one stream).
   * Input streams of closed ones are reused.
   */
  private final class StreamPerChannel(instance: SerializerInstance, n: Int) extends SparkRecordDecoder {
    private val inputs = new Array[RecordInputStream](n)
    private val streams = new Array[DeserializationStream](n)
    private val idle = new java.util.ArrayDeque[RecordInputStream]()
    private var live = 0
    override def decode(input: Int, record: RecordView): Product2[Any, Any] = {
      var in = inputs(input)
      if (in == null) {
        in = idle.poll()
        if (in == null) in = new RecordInputStream
        inputs(input) = in
        live += 1
      }
      in.set(record)
      var s = streams(input)
      if (s == null) { s = instance.deserializeStream(in); streams(input) = s }
      val k = s.readKey[Any]()
      val v = s.readValue[Any]()
      in.keepUnread() // e.g. a reset marker written after the record; read before the next one
      (k, v)
    }
    override def startStream(input: Int): Unit = {
      val s = streams(input)
      streams(input) = null
      val in = inputs(input)
      if (in != null) in.clear()
      if (s != null) s.close()
    }
    override def endInput(input: Int): Unit = {
      startStream(input)
      val in = inputs(input)
      if (in != null) {
        inputs(input) = null
        live -= 1
        idle.push(in)
      }
    }
    override def numLiveStreams: Int = live
  }

  /**
   * The bytes of the current record, preceded by any bytes an earlier record left unread; -1 at
   * the end, never blocking, so a stream can only read records that have fully arrived.
   */
  private final class RecordInputStream extends InputStream {
    private val carry = new DataOutputSerializer(16)
    private var carryPos = 0
    private var base: AnyRef = _
    private var offset = 0L
    private var end = 0L

    def set(r: RecordView): Unit = { base = r.base; offset = r.offset; end = r.offset + r.length }

    def keepUnread(): Unit = {
      if (carryPos > 0) { carry.discard(carryPos); carryPos = 0 }
      val left = (end - offset).toInt
      if (left > 0) { carry.write(base, offset, left); offset = end }
    }

    def clear(): Unit = { carry.clear(); carryPos = 0; offset = end; base = null }

    override def read(): Int =
      if (carryPos < carry.length) { val b = carry.array(carryPos) & 0xff; carryPos += 1; b }
      else if (offset < end) { val b = Platform.getByte(base, offset) & 0xff; offset += 1; b }
      else -1

    override def read(b: Array[Byte], off: Int, len: Int): Int = {
      if (len == 0) return 0
      var n = 0
      val fromCarry = math.min(len, carry.length - carryPos)
      if (fromCarry > 0) {
        System.arraycopy(carry.array, carryPos, b, off, fromCarry)
        carryPos += fromCarry
        n = fromCarry
      }
      val fromRecord = math.min(len - n, (end - offset).toInt)
      if (fromRecord > 0) {
        Platform.copyMemory(base, offset, b, Platform.BYTE_ARRAY_OFFSET + off + n, fromRecord)
        offset += fromRecord
        n += fromRecord
      }
      if (carryPos == carry.length && carryPos > 0) { carry.clear(); carryPos = 0 }
      if (n == 0) -1 else n
    }

    override def available(): Int = (carry.length - carryPos) + (end - offset).toInt
  }
}
