package io.sluice.serialization

import io.netty.buffer.{ByteBuf, Unpooled}
import io.sluice.NettyLeakDetection
import io.sluice.memory.TestingBufferPools._
import io.sluice.partition.{NoOpBufferAvailabilityListener, TestingElementReader}
import io.sluice.partition.TestingRecords._
import io.sluice.partition.TestingResultPartitions._
import org.scalatest.funsuite.AnyFunSuite

/**
 * Record framing end to end: elements written with ResultPartition.emitRecord and
 * broadcastLatencyMarker into 32 KiB buffers, read back by the SpanningRecordDeserializer.
 */
class SpanningRecordDeserializerSuite extends AnyFunSuite with NettyLeakDetection {

  private val Segment = 32 * 1024

  /** Writes `elements` into a one-channel pipelined partition, reading its buffers back as it goes. */
  private def roundTrip(elements: Seq[Element]): Seq[Element] = withNetworkBufferPool(80, Segment) { global =>
    val partition = pipelined(global, 1, poolMax = 80)
    val view = partition.createSubpartitionView(0, 1, NoOpBufferAvailabilityListener)
    val reader = new TestingElementReader
    elements.foreach { e =>
      e match {
        case Rec(b) => emit(partition, 0, b.toArray)
        case Marker(t, stage, index) => partition.broadcastLatencyMarker(t, stage, index)
      }
      partition.flush(0)
      assert(!drain(view, reader))
    }
    partition.finish()
    assert(drain(view, reader), "the end of the partition follows the last buffer")
    assert(!reader.hasPartialRecord)
    assert(partition.isReleased, "its only subpartition was consumed")
    reader.elements.toSeq
  }

  private def sized(lengths: Int*): Seq[Element] = lengths.zipWithIndex.map { case (n, i) => rec(bytes(0, i, n)) }

  /**
   * Builds a sequence of elements while tracking where each lands in its buffer: frames are written
   * back to back and a buffer is only cut when full, so the stream offset modulo the segment size
   * is the position inside the current buffer.
   */
  private final class Layout {
    private var offset = 0L
    val elements = new scala.collection.mutable.ArrayBuffer[Element]()
    def record(length: Int): Layout = { elements += rec(bytes(0, elements.size, length)); offset += 4 + length; this }
    def marker(m: Marker): Layout = { elements += m; offset += 4 + 16; this }

    /** A record that leaves exactly `left` bytes free in the current buffer. */
    def leave(left: Int): Layout = {
      val length = Math.floorMod(Segment - left - (offset % Segment).toInt - 4, Segment)
      record(length)
    }
    def positionInBuffer: Int = (offset % Segment).toInt
  }

  test("records of 0 bytes, 1 byte, exactly a buffer, a buffer plus one, and 1 MB read back unchanged") {
    val in = sized(0, 1, 0, Segment - 4, Segment, 0, Segment + 1, 1 << 20, 1, 0, 3 * Segment - 12, 2)
    val out = roundTrip(in)
    assert(out == in)
  }

  test("a record whose payload ends exactly at the end of a buffer") {
    val l = new Layout().record(Segment - 4)
    assert(l.positionInBuffer == 0, "the first record fills its buffer exactly")
    l.record(10).leave(0).record(0).record(5).leave(0).record(Segment).leave(0)
    assert(l.positionInBuffer == 0)
    assert(roundTrip(l.elements.toSeq) == l.elements.toSeq)
  }

  test("length headers split across buffers at every possible point") {
    val l = new Layout()
    (1 to 3).foreach { k =>
      l.leave(k).record(10) // k header bytes in one buffer, 4 - k in the next
      l.leave(k).record(0)
      l.leave(k).record(Segment + 3)
    }
    assert(roundTrip(l.elements.toSeq) == l.elements.toSeq)
  }

  test("latency markers between records keep their fields exactly, also when they span buffers") {
    val l = new Layout().record(100).marker(Marker(Long.MinValue, -1, Int.MaxValue))
      .marker(Marker(1700000000123L, 7, 0)).record(0).marker(Marker(-1L, Int.MinValue, -1))
    (1 to 3).foreach(k => l.leave(k).marker(Marker(k.toLong, k, -k))) // the -1 header is split
    Seq(1, 8, 12, 15).foreach(k => l.leave(4 + k).marker(Marker(Long.MaxValue - k, 42, 43))) // the body is split
    l.leave(0).marker(Marker(0L, 0, 0)).record(1)
    assert(roundTrip(l.elements.toSeq) == l.elements.toSeq)
  }

  test("random mixes of record sizes and markers round-trip") {
    val rnd = new java.util.Random(2024)
    val in = (0 until 1500).map { i =>
      rnd.nextInt(40) match {
        case 0 => Marker(rnd.nextLong(), rnd.nextInt(), rnd.nextInt())
        case 1 => rec(bytes(1, i, Segment - 4 + rnd.nextInt(9) - 4))
        case 2 if rnd.nextInt(10) == 0 => rec(bytes(1, i, (1 << 20) - rnd.nextInt(64)))
        case n if n < 10 => rec(bytes(1, i, rnd.nextInt(2 * Segment)))
        case _ => rec(bytes(1, i, rnd.nextInt(200)))
      }
    }
    val out = roundTrip(in)
    assert(out.size == in.size)
    in.zip(out).zipWithIndex.foreach { case ((a, b), i) => assert(a == b, s"element $i") }
  }

  // ---- the deserializer on its own -----------------------------------------------------------

  private def frames(elements: Seq[Element]): Array[Byte] = {
    val out = new java.io.ByteArrayOutputStream()
    val data = new java.io.DataOutputStream(out)
    elements.foreach {
      case Rec(b) => data.writeInt(b.length); data.write(b.toArray)
      case Marker(t, s, i) => data.writeInt(-1); data.writeLong(t); data.writeInt(s); data.writeInt(i)
    }
    out.toByteArray
  }

  private def direct(bytes: Array[Byte], from: Int, until: Int): ByteBuf = {
    val b = Unpooled.directBuffer(math.max(1, until - from))
    b.writeBytes(bytes, from, until - from)
    b
  }

  test("a byte stream cut into pieces of any size reads back the same") {
    val in = Seq(rec(bytes(2, 0, 0)), rec(bytes(2, 1, 5)), Marker(99L, 1, 2), rec(bytes(2, 2, 1)), rec(bytes(2, 3, 37)),
      Marker(-5L, 3, 4), rec(bytes(2, 4, 0)))
    val stream = frames(in)
    (1 to stream.length).foreach { piece =>
      val reader = new TestingElementReader
      stream.indices.by(piece).foreach(from => reader.feed(direct(stream, from, math.min(stream.length, from + piece))))
      assert(reader.elements.toSeq == in, s"pieces of $piece bytes")
      assert(!reader.hasPartialRecord)
    }
  }

  test("a record read in place points into the buffer; a spanning one is gathered") {
    val d = new SpanningRecordDeserializer
    val view = new RecordView
    val stream = frames(Seq(rec(bytes(3, 0, 8)), rec(bytes(3, 1, 8))))
    val buf = direct(stream, 0, 18) // the first record and half of the second
    d.setNextBuffer(buf)
    assert(d.readNext(view) == SpanningRecordDeserializer.Record)
    assert(view.base == null && view.offset == buf.memoryAddress() + 4 && view.length == 8)
    assert(view.toByteArray.sameElements(bytes(3, 0, 8)))
    assert(d.readNext(view) == SpanningRecordDeserializer.NeedMoreData)
    assert(d.hasPartialRecord && !d.hasUnreadData)
    buf.release()
    val rest = direct(stream, 18, stream.length)
    d.setNextBuffer(rest)
    assert(d.readNext(view) == SpanningRecordDeserializer.Record)
    assert(view.base.isInstanceOf[Array[Byte]])
    assert(view.toByteArray.sameElements(bytes(3, 1, 8)))
    assert(d.readNext(view) == SpanningRecordDeserializer.NeedMoreData)
    assert(!d.hasPartialRecord)
    rest.release()
  }

  test("a buffer may not be replaced while it still holds elements") {
    val d = new SpanningRecordDeserializer
    val buf = direct(frames(Seq(rec(bytes(4, 0, 3)), rec(bytes(4, 1, 3)))), 0, 14)
    d.setNextBuffer(buf)
    assert(d.readNext(new RecordView) == SpanningRecordDeserializer.Record)
    intercept[IllegalArgumentException](d.setNextBuffer(buf))
    d.clear()
    buf.release()
  }

  private def corrupt(pieces: Array[Byte]*): CorruptFrameException = {
    val d = new SpanningRecordDeserializer
    val view = new RecordView
    intercept[CorruptFrameException] {
      pieces.foreach { p =>
        val b = direct(p, 0, p.length)
        try {
          d.setNextBuffer(b)
          while (d.readNext(view) != SpanningRecordDeserializer.NeedMoreData) {}
        } finally b.release()
      }
    }
  }

  test("a corrupt length raises CorruptFrameException, whole or split across buffers") {
    assert(corrupt(Array[Byte](-1, -1, -1, -2, 0, 0)).getMessage.contains("-2"))
    assert(corrupt(Array[Byte](0x7f, -1, -1, -1, 1, 2, 3)).getMessage.contains(Int.MaxValue.toString))
    corrupt(Array[Byte](0, 0, 0, 1, 9, -128), Array[Byte](0, 0, 0, 1))
    corrupt(Array[Byte](0, 0, 0, 0, -1, -1), Array[Byte](-1, -3, 0, 0))
    corrupt(Array[Byte](0x40, 0, 0), Array[Byte](1)) // 2^30 + 1: longer than any record can be
  }

  test("a stream that ends inside a record is reported as partial") {
    val stream = frames(Seq(rec(bytes(5, 0, 100))))
    val reader = new TestingElementReader
    reader.feed(direct(stream, 0, 50))
    assert(reader.hasPartialRecord && reader.elements.isEmpty)
    val header = new TestingElementReader
    header.feed(direct(stream, 0, 2))
    assert(header.hasPartialRecord)
  }
}
