package io.sluice.partition

import io.sluice.NettyLeakDetection
import io.sluice.memory.TestingBufferPools._
import io.sluice.partition.TestingRecords._
import io.sluice.partition.TestingResultPartitions._
import org.scalatest.funsuite.AnyFunSuite

/** Availability, backlog and notifications of one pipelined subpartition (4 KiB buffers). */
class PipelinedSubpartitionSuite extends AnyFunSuite with NettyLeakDetection {

  /** Reads the other subpartitions to their end so the partition can release itself. */
  private def consumeRest(p: PipelinedResultPartition, from: Int): Unit = (from until p.numSubpartitions).foreach { i =>
    val v = p.createSubpartitionView(i, i + 1, NoOpBufferAvailabilityListener)
    assert(drain(v, new TestingElementReader))
  }

  test("FLINK-11082: the unfinished buffer counts in the backlog only once flushed, and stays queued when read") {
    withNetworkBufferPool(16) { global =>
      val p = pipelined(global, 2, poolMax = 16)
      val listener = new TestingAvailabilityListener
      val view = p.createSubpartitionView(0, 1, listener)
      val sub = p.subpartition(0)
      val reader = new TestingElementReader

      emit(p, 0, bytes(0, 0, 100))
      assert(sub.queueLength == 1)
      assert(view.backlog == 0, "a buffer being written is not backlog")
      assert(!view.isAvailable(1))
      assert(view.getNextBuffer() == null, "partial data is not readable before a flush")
      assert(listener.notifications.get == 0)

      p.flush(0)
      assert(view.backlog == 1, "a flushed buffer counts")
      assert(view.isAvailable(1))
      assert(!view.isAvailable(0), "data needs a credit")
      assert(listener.notifications.get == 1)
      val first = view.getNextBuffer()
      assert(first.buffer.readableBytes() == 104)
      assert(first.backlog == 0)
      reader.feed(first.buffer)
      assert(sub.queueLength == 1, "the flushed buffer stays in the queue: it is still being written")
      assert(!view.isAvailable(1) && view.getNextBuffer() == null)

      emit(p, 0, bytes(0, 1, 50))
      p.flush(0)
      assert(listener.notifications.get == 2)
      val second = view.getNextBuffer()
      assert(second.buffer.readableBytes() == 54, "the next read continues from the reader index")
      reader.feed(second.buffer)
      assert(reader.records.map(_.toSeq) == Seq(bytes(0, 0, 100).toSeq, bytes(0, 1, 50).toSeq))

      // Fill the buffer: it is finished and counts without a flush; the new one does not.
      var seq = 2
      while (sub.queueLength < 2) { emit(p, 0, bytes(0, seq, 1000)); seq += 1 }
      assert(view.backlog == 1)
      val full = view.getNextBuffer()
      assert(full.backlog == 0)
      reader.feed(full.buffer)
      assert(sub.queueLength == 1)
      p.finish()
      assert(view.backlog == 1, "after finish every queued buffer is readable")
      assert(drain(view, reader))
      assert(reader.records.size == seq)
      assert(reader.records.zipWithIndex.forall { case (r, i) => r.length == (if (i == 0) 100 else if (i == 1) 50 else 1000) })
      consumeRest(p, 1)
      assert(p.isReleased)
    }
  }

  test("readers are notified on the rising edge of availability only") {
    withNetworkBufferPool(16) { global =>
      val p = pipelined(global, 1, poolMax = 16)
      val listener = new TestingAvailabilityListener
      val view = p.createSubpartitionView(0, 1, listener)
      val reader = new TestingElementReader
      (0 until 12).foreach(i => emit(p, 0, bytes(0, i, 1000))) // two buffers finished, a third partly written
      assert(p.subpartition(0).queueLength == 3)
      assert(listener.notifications.get == 1, "one notification for the first readable buffer, none for the next ones")
      p.flush(0)
      assert(listener.notifications.get == 1, "the queue was already readable")
      assert(!drain(view, reader))
      assert(reader.records.size == 12)
      emit(p, 0, bytes(0, 12, 10))
      assert(listener.notifications.get == 1)
      p.flush(0)
      assert(listener.notifications.get == 2, "a flush after the reader drained everything is a rising edge")
      emit(p, 0, bytes(0, 13, 10))
      p.flush(0)
      assert(listener.notifications.get == 2, "still unread: no new edge")
      p.finish()
      // Finishing the only buffer always notifies (a flush racing with it could not tell).
      assert(listener.notifications.get == 3)
      assert(drain(view, reader))
      assert(reader.records.size == 14)
    }
  }

  test("the end of the partition is a rising edge of its own, after the last buffer") {
    withNetworkBufferPool(16) { global =>
      val p = pipelined(global, 1, poolMax = 16)
      val listener = new TestingAvailabilityListener
      val view = p.createSubpartitionView(0, 1, listener)
      emit(p, 0, bytes(0, 0, 10))
      p.flush(0)
      assert(listener.notifications.get == 1)
      val b = view.getNextBuffer()
      assert(!b.isEndOfPartition)
      b.recycle()
      p.finish()
      assert(listener.notifications.get == 2, "finishing the read buffer makes the queue readable again")
      val end = view.getNextBuffer()
      assert(end.isEndOfPartition && end.subpartition == 0 && end.size == 0)
      assert(view.getNextBuffer() == null, "the end is delivered once")
    }
  }

  test("an empty partition delivers only its end, which needs no credit") {
    withNetworkBufferPool(16) { global =>
      val p = pipelined(global, 1, poolMax = 16)
      val listener = new TestingAvailabilityListener
      val view = p.createSubpartitionView(0, 1, listener)
      assert(!view.isAvailable(1))
      p.finish()
      assert(listener.notifications.get == 1)
      assert(view.isAvailable(0), "the end needs no credit")
      assert(view.backlog == 0)
      assert(view.getNextBuffer().isEndOfPartition)
      assert(p.isReleased)
      assert(view.isAvailable(1) && view.isReleased, "a released view is available so its reader learns of it")
      assert(view.getNextBuffer() == null)
    }
  }

  test("a view created when data is already there is notified at once") {
    withNetworkBufferPool(16) { global =>
      val p = pipelined(global, 1, poolMax = 16)
      emit(p, 0, bytes(0, 0, 10))
      p.flush(0)
      val listener = new TestingAvailabilityListener
      val view = p.createSubpartitionView(0, 1, listener)
      assert(listener.notifications.get == 1)
      p.finish()
      assert(drain(view, new TestingElementReader))
    }
  }

  test("a pipelined subpartition is read once, one subpartition per view") {
    withNetworkBufferPool(16) { global =>
      val p = pipelined(global, 2, poolMax = 16)
      val view = p.createSubpartitionView(0, 1, NoOpBufferAvailabilityListener)
      val e = intercept[IllegalStateException](p.createSubpartitionView(0, 1, NoOpBufferAvailabilityListener))
      assert(e.getMessage.contains("read only once"))
      intercept[IllegalArgumentException](p.createSubpartitionView(0, 2, NoOpBufferAvailabilityListener))
      intercept[IndexOutOfBoundsException](p.createSubpartitionView(2, 3, NoOpBufferAvailabilityListener))
      p.finish()
      assert(drain(view, new TestingElementReader))
      consumeRest(p, 1)
    }
  }

  test("the queue, the counters and outPoolUsage follow the writer") {
    withNetworkBufferPool(16) { global =>
      val p = pipelined(global, 2, poolMax = 4)
      assert(p.outPoolUsage == 0f)
      (0 until 10).foreach(i => emit(p, i % 2, bytes(0, i, 1000)))
      assert(p.numRecordsOut.sum == 10)
      assert(p.numBytesOut.sum == 10 * 1004)
      assert(p.numBuffersOut.sum == 2, "each subpartition filled one buffer")
      assert(p.numQueuedBuffers == 4)
      assert(p.outPoolUsage == 1f)
      p.finish()
      assert(p.numBuffersOut.sum == 4)
      (0 until 2).foreach { i =>
        assert(drain(p.createSubpartitionView(i, i + 1, NoOpBufferAvailabilityListener), new TestingElementReader))
      }
      assert(p.outPoolUsage == 0f)
    }
  }
}
