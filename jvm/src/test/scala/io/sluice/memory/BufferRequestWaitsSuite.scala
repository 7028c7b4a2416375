package io.sluice.memory

import java.util.concurrent.atomic.LongAdder

import io.sluice.NettyLeakDetection
import org.scalatest.funsuite.AnyFunSuite

class BufferRequestWaitsSuite extends AnyFunSuite with NettyLeakDetection {

  /** Runs `body` on a new thread whose waits for buffers count into the returned adder. */
  private def onBoundThread(body: => Unit): (Thread, LongAdder) = {
    val nanos = new LongAdder
    val t = new Thread(() => {
      BufferRequestWaits.bind(nanos)
      try body
      finally BufferRequestWaits.unbind(nanos)
    })
    t.start()
    (t, nanos)
  }

  test("a wait for room for exclusive buffers counts for the waiting thread only") {
    val global = new NetworkBufferPool(4, 4096)
    try {
      val holder = global.createBufferPool(4, 4, "holder", 10000L) // requires every segment
      val (waiter, nanos) = onBoundThread {
        val segments = global.requestUnpooledSegments(1, 10000L, "waiter")
        global.recycleUnpooledSegments(segments)
      }
      Thread.sleep(300)
      holder.lazyDestroy()
      waiter.join(10000L)
      assert(!waiter.isAlive)
      assert(nanos.sum() >= 250L * 1000000L, nanos.sum())
      // A request that fits at once waits for nothing.
      val (quick, quickNanos) = onBoundThread(global.recycleUnpooledSegments(global.requestUnpooledSegments(1, 1000L, "q")))
      quick.join(10000L)
      assert(quickNanos.sum() == 0L)
    } finally global.destroy()
  }

  test("a producer's wait for a pool's buffer counts as a wait for network buffers") {
    val global = new NetworkBufferPool(2, 4096)
    try {
      val pool = global.createBufferPool(1, 1, "producer", 10000L)
      val held = pool.requestBuffer()
      assert(held != null)
      val (producer, nanos) = onBoundThread(pool.requestBufferBlocking(10000L).release())
      Thread.sleep(300)
      held.release()
      producer.join(10000L)
      assert(!producer.isAlive)
      assert(nanos.sum() >= 250L * 1000000L && pool.backPressuredTimeNanos.sum() >= nanos.sum(), nanos.sum())
      pool.lazyDestroy()
    } finally global.destroy()
  }
}
