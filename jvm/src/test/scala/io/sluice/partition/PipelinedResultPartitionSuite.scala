package io.sluice.partition

import java.util.concurrent.TimeoutException
import java.util.concurrent.atomic.AtomicInteger

import io.sluice.NettyLeakDetection
import io.sluice.TestingThreads._
import io.sluice.memory.TestingBufferPools._
import io.sluice.partition.TestingRecords._
import io.sluice.partition.TestingResultPartitions._
import io.sluice.writer.OutputFlusher
import org.scalatest.funsuite.AnyFunSuite

/** The life of a pipelined partition: consumption, self-release, backpressure and failure. */
class PipelinedResultPartitionSuite extends AnyFunSuite with NettyLeakDetection {

  test("after the last buffer every reader gets the end; then awaitConsumed returns and the partition releases itself") {
    withNetworkBufferPool(32) { global =>
      val releasedCalls = new AtomicInteger
      val p = pipelined(global, 2, poolMax = 16, onReleased = _ => releasedCalls.incrementAndGet())
      val views = (0 until 2).map(i => p.createSubpartitionView(i, i + 1, NoOpBufferAvailabilityListener))
      (0 until 20).foreach(i => emit(p, i % 2, bytes(i % 2, i, 700)))
      p.finish()
      intercept[IllegalStateException](emit(p, 0, bytes(0, 0, 1)))
      val producer = fork("producer awaiting consumption")(p.awaitConsumed(60000))

      val r0 = new TestingElementReader
      var next = views(0).getNextBuffer()
      while (!next.isEndOfPartition) { r0.feed(next.buffer); next = views(0).getNextBuffer() }
      assert(r0.records.size == 10, "the end comes after the last buffer")
      assert(p.subpartition(0).isConsumed && !p.subpartition(1).isConsumed)
      assert(!p.isReleased, "one subpartition is still unread")

      val r1 = new TestingElementReader
      assert(drain(views(1), r1))
      assert(r1.records.size == 10)
      assert(p.isReleased, "the last reader to reach the end releases the partition")
      assert(p.failureCause == null)
      producer.join()
      assert(releasedCalls.get == 1)
      assert(views.forall(_.getNextBuffer() == null))
      p.release(new RuntimeException("late")) // idempotent: no second release
      assert(releasedCalls.get == 1 && p.failureCause == null)
    }
  }

  test("awaitConsumed times out naming the subpartitions whose readers never reached the end") {
    withNetworkBufferPool(8) { global =>
      val p = pipelined(global, 3, poolMax = 4)
      p.finish()
      assert(drain(p.createSubpartitionView(1, 2, NoOpBufferAvailabilityListener), new TestingElementReader))
      val e = intercept[TimeoutException](p.awaitConsumed(20))
      assert(e.getMessage.contains("0, 2"))
      p.release(null)
    }
  }

  test("maxBuffersPerSubpartition blocks the producer until the reader drains, and counts as backpressure") {
    withNetworkBufferPool(64) { global =>
      val p = pipelined(global, 1, poolMax = 64, maxBuffersPerSubpartition = 3)
      val listener = new TestingAvailabilityListener
      val view = p.createSubpartitionView(0, 1, listener)
      val count = 100
      val producer = fork("producer") {
        (0 until count).foreach(i => emit(p, 0, bytes(0, i, 1000)))
        p.finish()
        p.awaitConsumed(60000)
      }
      eventually(what = "three queued buffers")(p.subpartition(0).queueLength >= 3)
      producer.awaitWaiting()
      assert(p.subpartition(0).queueLength == 3, "the producer waits instead of queueing a fourth buffer")
      assert(!producer.isDone)
      assert(p.bufferPool.numUsedBuffers == 3, "the pool had buffers; the subpartition's bound held the producer")
      val reader = new TestingElementReader
      TestingViewReader.readToEnd(view, listener, reader)
      producer.join()
      assert(reader.records.zipWithIndex.forall { case (r, i) => r.sameElements(bytes(0, i, 1000)) })
      assert(reader.records.size == count)
      assert(p.backPressuredTimeNanos.sum > 0)
      assert(p.isReleased)
    }
  }

  test("a producer held by maxBuffersPerSubpartition is woken at a low-water mark, not for every buffer taken") {
    assert(PipelinedSubpartition.roomLowWater(10) == 8 && PipelinedSubpartition.roomLowWater(4) == 3)
    assert(PipelinedSubpartition.roomLowWater(1) == 0)
    withNetworkBufferPool(64) { global =>
      val p = pipelined(global, 1, poolMax = 64, maxBuffersPerSubpartition = 10)
      val listener = new TestingAvailabilityListener
      val view = p.createSubpartitionView(0, 1, listener)
      val count = 100
      val producer = fork("producer") {
        (0 until count).foreach(i => emit(p, 0, bytes(0, i, 1000)))
        p.finish()
        p.awaitConsumed(60000)
      }
      eventually(what = "ten queued buffers")(p.subpartition(0).queueLength >= 10)
      producer.awaitWaiting()
      val first = view.getNextBuffer()
      val reader = new TestingElementReader
      reader.feed(first.buffer)
      Thread.sleep(200) // time enough for a woken producer to queue a buffer
      producer.awaitWaiting()
      assert(p.subpartition(0).queueLength == 9, "one buffer taken: the producer still waits")
      reader.feed(view.getNextBuffer().buffer)
      eventually(what = "the producer to refill the queue")(p.subpartition(0).queueLength == 10)
      TestingViewReader.readToEnd(view, listener, reader)
      producer.join()
      assert(reader.records.size == count)
      assert(reader.records.zipWithIndex.forall { case (r, i) => r.sameElements(bytes(0, i, 1000)) })
    }
  }

  test("a producer blocked on a full subpartition is woken by release with ProducerFailedException") {
    withNetworkBufferPool(16) { global =>
      val p = pipelined(global, 2, poolMax = 16, maxBuffersPerSubpartition = 2)
      val view = p.createSubpartitionView(0, 1, NoOpBufferAvailabilityListener)
      val producer = fork("producer") {
        try (0 until 1000).foreach(i => emit(p, i % 2, bytes(0, i, 500)))
        finally p.closeBufferBuilders()
      }
      producer.awaitWaiting()
      p.release(new RuntimeException("consumer task failed"))
      val e = producer.failure()
      assert(e.isInstanceOf[ProducerFailedException], e)
      assert(e.getMessage.contains("consumer task failed"))
      assert(e.getMessage.contains(p.partitionId.toString))
      assert(view.isReleased && view.getNextBuffer() == null)
      assert(view.failureCause.getMessage == "consumer task failed")
      intercept[ProducerFailedException](p.createSubpartitionView(1, 2, NoOpBufferAvailabilityListener))
    }
  }

  test("a producer blocked on an empty buffer pool is woken by release with ProducerFailedException") {
    withNetworkBufferPool(16) { global =>
      val p = pipelined(global, 1, poolMax = 2)
      val producer = fork("producer") {
        try (0 until 1000).foreach(i => emit(p, 0, bytes(0, i, 500)))
        finally p.closeBufferBuilders()
      }
      eventually(what = "the pool to run dry")(p.bufferPool.numUsedBuffers == 2)
      producer.awaitWaiting()
      assert(!producer.isDone)
      p.release(new IllegalStateException("executor lost"))
      val e = producer.failure()
      assert(e.isInstanceOf[ProducerFailedException], e)
      assert(e.getMessage.contains("executor lost"))
      assert(p.backPressuredTimeNanos.sum > 0)
      intercept[ProducerFailedException](emit(p, 0, bytes(0, 0, 1)))
      intercept[ProducerFailedException](p.finish())
    }
  }

  test("a producer woken by release in the middle of a record that spans buffers fails with ProducerFailedException") {
    // Released buffers may reach the pool before it is destroyed and wake the producer, which then
    // continues its record and may ask for the next buffer from a destroyed pool (or finish the
    // record and fail at the next one). Repeated, because the order is up to the scheduler.
    (0 until 30).foreach { round =>
      withNetworkBufferPool(16) { global =>
        val p = pipelined(global, 1, poolMax = 2)
        val producer = fork(s"producer $round") {
          // Records of 16 buffers of 4 KiB, with a pool of 2.
          try (0 until 1000).foreach(i => emit(p, 0, bytes(0, round + i, 64 * 1024)))
          finally p.closeBufferBuilders()
        }
        eventually(what = "the pool to run dry")(p.bufferPool.numUsedBuffers == 2)
        producer.awaitWaiting()
        p.release(new RuntimeException(s"released in round $round"))
        val e = producer.failure()
        assert(e.isInstanceOf[ProducerFailedException], s"round $round: $e")
        assert(e.getMessage.contains(s"released in round $round"))
      }
    }
  }

  test("awaitConsumed fails when the partition was released before its readers finished") {
    withNetworkBufferPool(16) { global =>
      val p = pipelined(global, 1, poolMax = 4)
      emit(p, 0, bytes(0, 0, 10))
      p.finish()
      val producer = fork("producer")(p.awaitConsumed(60000))
      p.release(new RuntimeException("cancelled"))
      val e = producer.failure()
      assert(e.isInstanceOf[ProducerFailedException] && e.getMessage.contains("cancelled"))
    }
  }

  test("flushing a released partition is a no-op") {
    withNetworkBufferPool(16) { global =>
      val p = pipelined(global, 1, poolMax = 4)
      emit(p, 0, bytes(0, 0, 10))
      p.release(null)
      p.flushAll()
      p.closeBufferBuilders()
      assert(p.numQueuedBuffers == 0)
    }
  }

  test("an idle reader gets the next record at once (idle flush); a busy one lets buffers fill") {
    withNetworkBufferPool(16) { global =>
      // A buffer timeout of ten minutes: only the idle flush can make partial buffers readable.
      val p = pipelined(global, 1, poolMax = 16, bufferTimeoutMs = 600000L, idleFlushIntervalMs = 0L)
      val listener = new TestingAvailabilityListener
      val view = p.createSubpartitionView(0, 1, listener)
      val reader = new TestingElementReader
      assert(p.subpartition(0).isDrained, "a reader that found nothing is idle")
      emit(p, 0, bytes(0, 0, 100))
      assert(view.isAvailable(1), "the idle reader's next record was flushed at once")
      assert(listener.notifications.get == 1)
      // The reader has not taken it yet: the next records wait in the buffer (no flush each).
      emit(p, 0, bytes(0, 1, 100))
      emit(p, 0, bytes(0, 2, 100))
      assert(listener.notifications.get == 1)
      assert(!drain(view, reader))
      assert(reader.records.size == 3, "the flush request covers what was committed after it")
      assert(p.subpartition(0).isDrained)
      emit(p, 0, bytes(0, 3, 100))
      assert(view.isAvailable(1) && listener.notifications.get == 2, "idle again: flushed at once")
      p.finish()
      assert(drain(view, reader))
      assert(reader.records.size == 4)
      assert(p.isReleased, "consumed to the end: the partition released itself")
    }
  }

  test("a latency marker reaches an idle reader at once, even inside the idle-flush interval") {
    withNetworkBufferPool(16) { global =>
      val p = pipelined(global, 1, poolMax = 8, bufferTimeoutMs = 600000L, idleFlushIntervalMs = 600000L)
      val view = p.createSubpartitionView(0, 1, new TestingAvailabilityListener)
      val reader = new TestingElementReader
      emit(p, 0, bytes(0, 0, 100))
      assert(!drain(view, reader))
      emit(p, 0, bytes(0, 1, 100))
      assert(!view.isAvailable(1), "a record inside the interval waits")
      p.broadcastLatencyMarker(1234L, 5, 0)
      assert(view.isAvailable(1), "the marker (and the record before it) was flushed for the idle reader")
      assert(!drain(view, reader))
      assert(reader.elements.size == 3)
      assert(reader.elements.last == TestingRecords.Marker(1234L, 5, 0))
      p.release(null)
      p.closeBufferBuilders()
      view.releaseAllResources()
    }
  }

  test("a record inside the idle-flush interval is flushed when the interval ends, not at the buffer timeout") {
    withNetworkBufferPool(16) { global =>
      val flusher = new OutputFlusher("test-output-flusher")
      try {
        // A buffer timeout of ten minutes and an idle-flush interval of three seconds.
        val p = pipelined(global, 2, poolMax = 16, bufferTimeoutMs = 600000L, idleFlushIntervalMs = 3000L,
          flusher = Some(flusher))
        val listener = new TestingAvailabilityListener
        val otherListener = new TestingAvailabilityListener
        val view = p.createSubpartitionView(0, 1, listener)
        val otherView = p.createSubpartitionView(1, 2, otherListener)
        val reader = new TestingElementReader
        emit(p, 0, bytes(0, 0, 100))
        assert(listener.notifications.get == 1, "the first record for the idle reader was flushed at once")
        assert(!drain(view, reader) && reader.records.size == 1)
        // A burst inside the interval: both records wait, for one deferred flush.
        emit(p, 0, bytes(0, 1, 100))
        emit(p, 0, bytes(0, 2, 100))
        assert(!view.isAvailable(1), "inside the interval the records wait")
        assert(listener.awaitNotification() && listener.awaitNotification(), "then the deferred idle flush came")
        assert(!drain(view, reader))
        assert(reader.records.size == 3)
        assert(listener.notifications.get == 2)
        assert(otherListener.notifications.get == 0, "a subpartition without records is not flushed")
        p.release(null)
        p.closeBufferBuilders()
        view.releaseAllResources()
        otherView.releaseAllResources()
      } finally flusher.shutdown()
    }
  }

  /**
   * A one-subpartition partition whose deferred idle flushes an OutputFlusher runs, its view (with
   * `listener`) and a reader that already read a first record, flushed at once for the idle reader.
   */
  private def withFirstRecordRead(bufferTimeoutMs: Long, idleFlushIntervalMs: Long)(
      body: (PipelinedResultPartition, ResultSubpartitionView, TestingAvailabilityListener,
          TestingElementReader) => Unit): Unit = withNetworkBufferPool(16) { global =>
    val flusher = new OutputFlusher("test-output-flusher")
    try {
      val p = pipelined(global, 1, poolMax = 8, bufferTimeoutMs = bufferTimeoutMs,
        idleFlushIntervalMs = idleFlushIntervalMs, flusher = Some(flusher))
      val listener = new TestingAvailabilityListener
      val view = p.createSubpartitionView(0, 1, listener)
      val reader = new TestingElementReader
      emit(p, 0, bytes(0, 0, 100))
      assert(!drain(view, reader) && reader.records.size == 1)
      body(p, view, listener, reader)
      p.release(null)
      p.closeBufferBuilders()
      view.releaseAllResources()
    } finally flusher.shutdown()
  }

  test("a deferred idle flush counts as its interval's: a stream that goes on is flushed once per interval") {
    withFirstRecordRead(bufferTimeoutMs = 600000L, idleFlushIntervalMs = 3000L) { (p, view, listener, reader) =>
      emit(p, 0, bytes(0, 1, 100))
      assert(listener.awaitNotification() && listener.awaitNotification(), "the deferred idle flush came")
      assert(!drain(view, reader) && reader.records.size == 2)
      // Right after the deferred flush: inside its interval, so deferred again, not flushed at once.
      emit(p, 0, bytes(0, 2, 100))
      assert(!view.isAvailable(1), "a record right after a deferred flush waits for the next interval")
      assert(listener.awaitNotification(), "and is flushed when that interval ends")
      assert(!drain(view, reader) && reader.records.size == 3)
    }
  }

  test("no deferred idle flush with a buffer timeout no longer than the interval (the flusher's tick comes as soon)") {
    withFirstRecordRead(bufferTimeoutMs = 200L, idleFlushIntervalMs = 200L) { (p, view, _, _) =>
      emit(p, 0, bytes(0, 1, 100))
      Thread.sleep(600)
      assert(!view.isAvailable(1), "nothing deferred (and no periodic flush registered here)")
    }
  }

  test("idle flushes are spaced by their interval, and off with a buffer timeout of -1") {
    withNetworkBufferPool(16) { global =>
      val spaced = pipelined(global, 1, poolMax = 8, bufferTimeoutMs = 600000L, idleFlushIntervalMs = 600000L)
      val view = spaced.createSubpartitionView(0, 1, new TestingAvailabilityListener)
      val reader = new TestingElementReader
      emit(spaced, 0, bytes(0, 0, 100))
      assert(view.isAvailable(1), "the first idle flush is due at once")
      assert(!drain(view, reader))
      emit(spaced, 0, bytes(0, 1, 100))
      assert(!view.isAvailable(1), "the next one only after ten minutes")
      spaced.release(null)
      spaced.closeBufferBuilders()
      view.releaseAllResources()

      val off = pipelined(global, 1, poolMax = 8, bufferTimeoutMs = -1L, idleFlushIntervalMs = 0L)
      val offView = off.createSubpartitionView(0, 1, new TestingAvailabilityListener)
      emit(off, 0, bytes(0, 0, 100))
      assert(!offView.isAvailable(1), "buffer timeout -1: only full buffers are sent")
      off.release(null)
      off.closeBufferBuilders()
      offView.releaseAllResources()
    }
  }
}
