package io.sluice.netty

import java.util.concurrent.atomic.AtomicLong

import scala.collection.mutable

import io.sluice.partition.consumer.{InputBuffer, SingleInputGate}
import io.sluice.serialization.{RecordView, SpanningRecordDeserializer}

/**
 * Reads records out of a gate the way a task would (one deserializer per channel, each buffer
 * released before the next is taken) and checks them with [[TestingRecords.check]]: per
 * (producer, subpartition) the sequence numbers must run 0, 1, 2, ... without gaps. Single-threaded
 * apart from [[recordsRead]], which other threads may watch.
 */
final class TestingGateReader(val gate: SingleInputGate) {
  private val deserializers = mutable.HashMap.empty[Int, SpanningRecordDeserializer]
  private val view = new RecordView
  private var current: InputBuffer = _
  private var currentDeserializer: SpanningRecordDeserializer = _
  private val nextSeq = mutable.HashMap.empty[(Long, Int), Int]
  val recordsRead = new AtomicLong

  /** The next record's bytes, or null when the gate ended. */
  def next(): Array[Byte] = {
    while (true) {
      if (current != null) {
        val r = currentDeserializer.readNext(view)
        if (r == SpanningRecordDeserializer.Record) return view.toByteArray
        if (r == SpanningRecordDeserializer.NeedMoreData) { current.buffer.release(); current = null }
      } else {
        current = gate.getNext()
        if (current == null) return null
        currentDeserializer = deserializers.getOrElseUpdate(current.input, new SpanningRecordDeserializer)
        currentDeserializer.setNextBuffer(current.buffer)
      }
    }
    null
  }

  /** Reads and checks one record; false at the end. */
  def readOne(): Boolean = {
    val bytes = next()
    if (bytes == null) false
    else {
      val (producer, sub, seq) = TestingRecords.check(bytes)
      val expected = nextSeq.getOrElse((producer, sub), 0)
      assert(seq == expected, s"producer $producer subpartition $sub: record $seq arrived, expected $expected")
      nextSeq((producer, sub)) = seq + 1
      recordsRead.incrementAndGet()
      true
    }
  }

  /** Reads to the end; returns the number of records per (producer, subpartition). */
  def readAll(): Map[(Long, Int), Int] = {
    while (readOne()) ()
    nextSeq.toMap
  }

  /** Gives back the buffer being read (when a test stops early). */
  def releaseCurrent(): Unit = if (current != null) { current.buffer.release(); current = null }

  def close(): Unit = { releaseCurrent(); gate.close() }
}
