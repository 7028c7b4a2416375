package io.sluice.writer

import java.util.concurrent.atomic.AtomicInteger

import io.sluice.NettyLeakDetection
import io.sluice.TestingThreads.eventually
import io.sluice.memory.LocalBufferPool
import io.sluice.memory.TestingBufferPools._
import io.sluice.partition._
import org.scalatest.funsuite.AnyFunSuite

/** The output flusher goes on flushing whatever one partition's flush throws. */
class OutputFlusherSuite extends AnyFunSuite with NettyLeakDetection {

  /** A partition that only counts its flushes; the first `failFirst` of them throw. */
  private final class CountingPartition(producerId: Long, pool: LocalBufferPool, failFirst: Int)
    extends ResultPartition(ResultPartitionID(0, producerId), ResultPartitionType.Pipelined, 1, pool) {
    val flushes = new AtomicInteger
    override protected def flushSubpartition(subpartition: Int): Unit =
      if (flushes.incrementAndGet() <= failFirst) throw new IllegalStateException(s"flush $flushes of $partitionId broke")
    override protected def writeFrame(subpartition: Int, header: Int, base: AnyRef, offset: Long, length: Int): Unit = ()
    override protected def finishWriting(): Unit = ()
    override protected def onRelease(cause: Throwable): Unit = ()
    override def closeBufferBuilders(): Unit = ()
    override def createSubpartitionView(start: Int, end: Int, listener: BufferAvailabilityListener): ResultSubpartitionView =
      throw new UnsupportedOperationException
    override def numQueuedBuffers: Int = 0
  }

  test("after one partition's flush throws, the others are still flushed, and so is that one at later ticks") {
    withNetworkBufferPool(4) { global =>
      val flusher = new OutputFlusher("test-output-flusher")
      try {
        val failing = new CountingPartition(1, global.createBufferPool(1, 1, "failing"), failFirst = 3)
        val healthy = new CountingPartition(2, global.createBufferPool(1, 1, "healthy"), failFirst = 0)
        val registrations = Seq(flusher.register(failing, 1), flusher.register(healthy, 1))
        eventually(what = "the failing partition's flush to throw three times, then succeed twice") {
          failing.flushes.get >= 5
        }
        val seen = healthy.flushes.get
        eventually(what = "the other partition to be flushed again")(healthy.flushes.get > seen + 3)
        registrations.foreach(_.cancel())
        Seq(failing, healthy).foreach(_.release(null))
      } finally flusher.shutdown()
    }
  }

  test("a periodic task that throws runs again at its next tick") {
    val flusher = new OutputFlusher("test-output-flusher")
    try {
      val runs = new AtomicInteger
      val r = flusher.every(1)(() => if (runs.incrementAndGet() % 2 == 1) throw new RuntimeException("every other tick"))
      eventually(what = "five runs")(runs.get >= 5)
      r.cancel()
    } finally flusher.shutdown()
  }
}
