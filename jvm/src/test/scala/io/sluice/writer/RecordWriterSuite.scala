package io.sluice.writer

import io.sluice.NettyLeakDetection
import io.sluice.memory.TestingBufferPools._
import io.sluice.partition.{
  NoOpBufferAvailabilityListener, PipelinedResultPartition, ResultSubpartitionView, TestingAvailabilityListener,
  TestingElementReader
}
import io.sluice.partition.TestingRecords._
import io.sluice.partition.TestingResultPartitions._
import io.sluice.writer.TestingRecordWriters._
import org.scalatest.funsuite.AnyFunSuite

/** The three flush triggers: every record (timeout 0), the output flusher (timeout > 0), full buffers only (-1). */
class RecordWriterSuite extends AnyFunSuite with NettyLeakDetection {

  private val Segment = 4096

  private def finishAndDrain(p: PipelinedResultPartition, views: Seq[ResultSubpartitionView],
      readers: Seq[TestingElementReader]): Unit = {
    p.finish()
    views.zip(readers).foreach { case (v, r) => assert(drain(v, r)) }
    assert(p.isReleased)
  }

  test("buffer timeout 0: every record is readable right after it is emitted") {
    withNetworkBufferPool(32, Segment) { global =>
      val p = pipelined(global, 3, poolMax = 16)
      val views = (0 until 3).map(i => p.createSubpartitionView(i, i + 1, NoOpBufferAvailabilityListener))
      val readers = Seq.fill(3)(new TestingElementReader)
      val writer = new RecordWriter(p, new ByLength(3), PointingSerializer, flushAlways = true)
      (0 until 300).foreach { i =>
        val r = bytes(9, i, i * 7 % 3000)
        writer.emit(r)
        val ch = r.length % 3
        assert(views(ch).isAvailable(1), s"record $i is readable at once")
        assert(!drain(views(ch), readers(ch)))
        assert(readers(ch).records.last.sameElements(r))
      }
      writer.broadcastLatencyMarker(123L, 4, 5)
      views.zip(readers).foreach { case (v, r) =>
        assert(v.isAvailable(1))
        drain(v, r)
        assert(r.elements.last == Marker(123L, 4, 5))
      }
      finishAndDrain(p, views, readers)
    }
  }

  test("a positive buffer timeout: the output flusher makes partly filled buffers readable") {
    withNetworkBufferPool(32, Segment) { global =>
      val flusher = new OutputFlusher("test-output-flusher")
      try {
        val p = pipelined(global, 2, poolMax = 16)
        val listeners = Seq.fill(2)(new TestingAvailabilityListener)
        val views = (0 until 2).map(i => p.createSubpartitionView(i, i + 1, listeners(i)))
        val readers = Seq.fill(2)(new TestingElementReader)
        val registration = flusher.register(p, 5)
        val writer = new RecordWriter(p, new ByLength(2), ScratchSerializer, flushAlways = false)
        (0 until 5).foreach { round =>
          val r = bytes(8, round, 10 + 2 * round) // even length: channel 0; far from filling a buffer
          writer.emit(r)
          assert(listeners(0).awaitNotification(), s"the flusher made round $round readable")
          assert(!drain(views(0), readers(0)))
          assert(readers(0).records.last.sameElements(r))
        }
        assert(readers(0).records.size == 5)
        assert(listeners(1).notifications.get == 0, "an idle channel gets no notification")
        registration.cancel()
        assert(flusher.numRegistered == 0)
        finishAndDrain(p, views, readers)
      } finally flusher.shutdown()
    }
  }

  test("with a long buffer timeout nothing partial is readable before the flusher runs; full buffers are") {
    withNetworkBufferPool(32, Segment) { global =>
      val flusher = new OutputFlusher("test-output-flusher")
      try {
        val p = pipelined(global, 1, poolMax = 16)
        val listener = new TestingAvailabilityListener
        val view = p.createSubpartitionView(0, 1, listener)
        val reader = new TestingElementReader
        val registration = flusher.register(p, 10 * 60 * 1000L)
        assert(flusher.numRegistered == 1)
        val writer = new RecordWriter(p, new ByLength(1), PointingSerializer, flushAlways = false)
        (0 until 3).foreach(i => writer.emit(bytes(7, i, 100)))
        assert(!view.isAvailable(1) && view.backlog == 0)
        assert(view.getNextBuffer() == null)
        assert(listener.notifications.get == 0)
        // 40 more records of 104 bytes fill the first buffer (4096 bytes) and start a second.
        (3 until 43).foreach(i => writer.emit(bytes(7, i, 100)))
        assert(listener.notifications.get == 1, "a full buffer is readable without any flush")
        assert(!drain(view, reader))
        assert(reader.buffers == 1)
        assert(reader.records.size == 4096 / 104, "only the records that fit in the full buffer")
        writer.flushAll()
        assert(!drain(view, reader))
        assert(reader.records.size == 43)
        registration.cancel()
        assert(flusher.numRegistered == 0)
        finishAndDrain(p, Seq(view), Seq(reader))
      } finally flusher.shutdown()
    }
  }

  test("buffer timeout -1: only full buffers become readable, the rest at finish") {
    withNetworkBufferPool(64, Segment) { global =>
      val p = pipelined(global, 1, poolMax = 32)
      val view = p.createSubpartitionView(0, 1, NoOpBufferAvailabilityListener)
      val writer = new RecordWriter(p, new ByLength(1), ScratchSerializer, flushAlways = false)
      val reader = new TestingElementReader
      var emitted = 0L
      (0 until 400).foreach { i =>
        val r = bytes(6, i, (i * 37) % 500)
        writer.emit(r)
        emitted += 4 + r.length
        var next = view.getNextBuffer()
        while (next != null) {
          assert(next.buffer.readableBytes() == Segment, "before finish, only whole buffers are handed out")
          reader.feed(next.buffer)
          next = view.getNextBuffer()
        }
        assert(reader.buffers == emitted / Segment)
      }
      assert(reader.records.size < 400)
      p.finish()
      assert(drain(view, reader))
      assert(reader.records.size == 400)
      assert(reader.records.zipWithIndex.forall { case (r, i) => r.sameElements(bytes(6, i, (i * 37) % 500)) })
    }
  }

  test("the writer refuses a selector whose channels do not match the partition") {
    withNetworkBufferPool(8, Segment) { global =>
      val p = pipelined(global, 2, poolMax = 4)
      intercept[IllegalArgumentException](new RecordWriter(p, new ByLength(3), PointingSerializer, flushAlways = false))
      p.release(null)
    }
  }

  test("the output flusher needs a positive timeout") {
    val flusher = new OutputFlusher()
    try {
      withNetworkBufferPool(8, Segment) { global =>
        val p = pipelined(global, 1, poolMax = 4)
        intercept[IllegalArgumentException](flusher.register(p, 0))
        intercept[IllegalArgumentException](flusher.register(p, -1))
        assert(flusher.numRegistered == 0)
        p.release(null)
      }
    } finally flusher.shutdown()
  }
}
