package io.sluice.memory

import java.util.concurrent.{ConcurrentLinkedQueue, CyclicBarrier, TimeUnit, TimeoutException}
import java.util.concurrent.atomic.AtomicInteger

import io.sluice.{NettyLeakDetection, TestingThread}
import io.sluice.TestingThreads._
import io.sluice.memory.TestingBufferPools._
import org.scalatest.funsuite.AnyFunSuite

class LocalBufferPoolSuite extends AnyFunSuite with NettyLeakDetection {

  test("requests beyond the pool's size return null without blocking") {
    withNetworkBufferPool(10) { global =>
      val pool = global.createBufferPool(2, 2, "two")
      val a = pool.requestBuffer()
      val b = pool.requestBuffer()
      assert(a != null && b != null && !(a.segment eq b.segment))
      assert(pool.requestBuffer() == null)
      a.release()
      val c = pool.requestBuffer()
      assert(c.segment eq a.segment)
      Seq(b, c).foreach(_.release())
      pool.lazyDestroy()
    }
  }

  test("a blocking request waits until another thread recycles a buffer, and gets that buffer") {
    withNetworkBufferPool(10) { global =>
      val pool = global.createBufferPool(2, 2, "blocked producer")
      val a = pool.requestBuffer()
      val b = pool.requestBuffer()
      val waiter = fork("requester")(pool.requestBufferBlocking(60000))
      waiter.awaitWaiting()
      assert(!waiter.isDone)
      b.release()
      val got = waiter.join()
      assert(got.segment eq b.segment, "the recycled segment is the one handed to the waiting requester")
      assert(got.refCnt() == 1 && got.readableBytes() == 0)
      assert(pool.backPressuredTimeNanos.sum > 0, "the wait is counted as backpressure")
      Seq(a, got).foreach(_.release())
      pool.lazyDestroy()
    }
  }

  /** A pool of 4 buffers, all held by the test, and a producer thread blocked on it until 3 are free. */
  private def withExhaustedPool(owner: String, lowWaterMaxWaitNanos: Long = 60000000000L)(
      body: (LocalBufferPool, Seq[NetworkBuffer], TestingThread[NetworkBuffer]) => Unit): Unit =
    withNetworkBufferPool(10) { global =>
      val pool = global.createBufferPool(4, 4, owner)
      val held = Seq.fill(4)(pool.requestBuffer())
      val waiter = fork("producer")(pool.requestBufferBlocking(60000, lowWater = 3, lowWaterMaxWaitNanos))
      waiter.awaitWaiting()
      body(pool, held, waiter)
      pool.lazyDestroy()
    }

  test("a blocking request with a low-water mark sleeps until that many buffers are free, then takes one") {
    withExhaustedPool("batched producer") { (pool, held, waiter) =>
      held(0).release()
      held(1).release()
      Thread.sleep(50)
      assert(!waiter.isDone, "two free buffers do not wake a producer waiting for three")
      held(2).release()
      val got = waiter.join()
      assert(held.take(3).exists(_.segment eq got.segment))
      val rest = Seq(pool.requestBuffer(), pool.requestBuffer())
      assert(rest.forall(_ != null) && pool.requestBuffer() == null, "the other two stay free for the producer's next buffers")
      (held(3) +: got +: rest).foreach(_.release())
    }
  }

  test("a low-water mark that is never reached delays a blocked request only by the mark's wait") {
    withExhaustedPool("producer whose reader keeps three buffers", lowWaterMaxWaitNanos = 20000000L) { (_, held, waiter) =>
      held(0).release()
      val got = waiter.join()
      assert(got.segment eq held(0).segment)
      (got +: held.drop(1)).foreach(_.release())
    }
  }

  test("a low-water mark never holds back another blocked requester: the first free buffer wakes it") {
    withExhaustedPool("two requesters") { (pool, held, batched) =>
      val plain = fork("plain")(pool.requestBufferBlocking(60000))
      plain.awaitWaiting()
      held(0).release()
      val first = plain.join()
      assert(first.segment eq held(0).segment, "the plain requester is woken by the first free buffer")
      Seq(first, held(1), held(2)).foreach(_.release())
      val second = batched.join()
      Seq(second, held(3)).foreach(_.release())
      assert(pool.numUsedBuffers == 0)
    }
  }

  test("a blocking request times out with an error naming the pool") {
    withNetworkBufferPool(10) { global =>
      val pool = global.createBufferPool(1, 1, "stage 3 task 7 output")
      val a = pool.requestBuffer()
      val e = intercept[TimeoutException](pool.requestBufferBlocking(50))
      assert(e.getMessage.contains("stage 3 task 7 output"))
      assert(e.getMessage.contains("spark.sluice.network.bufferRequestTimeout"))
      a.release()
      pool.lazyDestroy()
    }
  }

  test("a listener registered when no buffer is free gets the next recycled buffer, exactly once") {
    withNetworkBufferPool(10) { global =>
      val pool = global.createBufferPool(1, 1, "gate")
      val a = pool.requestBuffer()
      val listener = new TestingBufferListener
      assert(pool.requestBufferOrListen(listener) == null)
      a.release()
      assert(listener.received.get == 1)
      val got = listener.buffers.poll()
      assert(got.segment eq a.segment)
      got.release()
      assert(listener.received.get == 1, "a listener is served once and then forgotten")
      assert(pool.numUsedBuffers == 0)
      // With a buffer free, the request is served at once and the listener is not registered.
      val other = new TestingBufferListener
      val direct = pool.requestBufferOrListen(other)
      assert(direct != null)
      direct.release()
      assert(other.received.get == 0)
      pool.lazyDestroy()
    }
  }

  test("a listener that refuses a buffer hands it on to the next listener and is unregistered") {
    withNetworkBufferPool(10) { global =>
      val pool = global.createBufferPool(1, 1, "gate")
      val a = pool.requestBuffer()
      val refusing = new TestingBufferListener(accept = false)
      val taking = new TestingBufferListener
      assert(pool.requestBufferOrListen(refusing) == null)
      assert(pool.requestBufferOrListen(taking) == null)
      a.release()
      assert(refusing.received.get == 1)
      assert(taking.received.get == 1)
      taking.buffers.poll().release()
      assert(refusing.received.get == 1)
      assert(pool.numUsedBuffers == 0)
      val removed = new TestingBufferListener
      val b = pool.requestBuffer()
      assert(pool.requestBufferOrListen(removed) == null)
      pool.removeListener(removed)
      b.release()
      assert(removed.received.get == 0)
      pool.lazyDestroy()
    }
  }

  test("requestBufferOrListen under contention: every listener is served exactly once and no buffer slips past") {
    withNetworkBufferPool(16) { global =>
      val pool = global.createBufferPool(3, 3, "contended")
      val threads = 4
      val rounds = 3000
      val barrier = new CyclicBarrier(threads)
      val listeners = new ConcurrentLinkedQueue[TestingBufferListener]()
      val served = new AtomicInteger
      val workers = (0 until threads).map { t =>
        fork(s"contender $t") {
          barrier.await()
          for (i <- 0 until rounds) {
            val listener = new TestingBufferListener
            var buffer = pool.requestBufferOrListen(listener)
            if (buffer == null) {
              listeners.add(listener)
              // Another thread holds every buffer and will release it: the listener must get one.
              if (!listener.firstOffer.await(60, TimeUnit.SECONDS)) {
                throw new AssertionError(s"thread $t round $i: a registered listener was never served ($pool)")
              }
              buffer = listener.buffers.poll()
              assert(buffer != null)
              served.incrementAndGet()
            }
            buffer.writeInt(t)
            if ((i & 7) == 0) Thread.`yield`()
            buffer.release()
          }
        }
      }
      workers.foreach(_.join())
      assert(served.get > 0, "the test never exercised the listener path")
      listeners.forEach(l => assert(l.received.get == 1, s"a listener was offered ${l.received.get} buffers"))
      assert(pool.numUsedBuffers == 0)
      pool.lazyDestroy()
    }
  }

  test("a shrunk pool gives its excess segments back to the executor as they are recycled") {
    withNetworkBufferPool(10) { global =>
      val pool = global.createBufferPool(1, 10, "first")
      val held = Seq.fill(10)(pool.requestBuffer())
      assert(global.numberOfAvailableSegments == 0)
      val second = global.createBufferPool(5, 10, "second")
      val size = pool.numBuffers
      assert(size < 10 && size >= 1)
      assert(pool.numRequestedSegments == 10, "segments in use cannot be taken away")
      held.take(10 - size).foreach(_.release())
      assert(global.numberOfAvailableSegments == 10 - size, "every recycled segment beyond the size went back")
      assert(pool.numRequestedSegments == size)
      held.drop(10 - size).foreach(_.release())
      assert(pool.numRequestedSegments == size, "segments within the size stay in the pool for reuse")
      assert(global.numberOfAvailableSegments == 10 - size)
      Seq(pool, second).foreach(_.lazyDestroy())
    }
  }

  test("a pool that grows serves its waiting listeners") {
    withNetworkBufferPool(4) { global =>
      val pool = global.createBufferPool(1, 4, "grows")
      val other = global.createBufferPool(3, 3, "leaves")
      assert(pool.numBuffers == 1)
      val a = pool.requestBuffer()
      val listener = new TestingBufferListener
      assert(pool.requestBufferOrListen(listener) == null)
      other.lazyDestroy()
      assert(pool.numBuffers == 4)
      assert(listener.received.get == 1, "the freed share is handed to the waiting listener")
      listener.buffers.poll().release()
      a.release()
      pool.lazyDestroy()
    }
  }

  test("lazyDestroy wakes blocked requesters with no buffer, tells listeners, and takes buffers back as released") {
    withNetworkBufferPool(10) { global =>
      val pool = global.createBufferPool(1, 1, "released partition")
      val a = pool.requestBuffer()
      val listener = new TestingBufferListener
      assert(pool.requestBufferOrListen(listener) == null)
      val waiter = fork("blocked requester")(pool.requestBufferBlocking(600000))
      waiter.awaitWaiting()
      pool.lazyDestroy()
      assert(waiter.join() == null, "a destroyed pool answers a blocked request with no buffer")
      assert(listener.destroyed.get == 1 && listener.received.get == 0)
      assert(pool.isDestroyed)
      assert(global.numberOfPools == 0)
      assert(global.numberOfAvailableSegments == 9)
      a.release()
      assert(global.numberOfAvailableSegments == 10, "a buffer released after destruction goes to the executor")
      pool.lazyDestroy() // idempotent
    }
  }

  test("a destroyed pool answers every request with no buffer and registers no listener") {
    withNetworkBufferPool(10) { global =>
      val pool = global.createBufferPool(2, 4, "closed gate")
      val held = pool.requestBuffer()
      pool.lazyDestroy()
      assert(pool.isDestroyed)
      assert(pool.requestBuffer() == null)
      assert(pool.requestBufferBlocking(600000) == null, "no wait: nothing will come")
      val listener = new TestingBufferListener
      assert(pool.requestBufferOrListen(listener) == null)
      held.release() // goes to the executor, not to a listener
      assert(listener.received.get == 0 && listener.destroyed.get == 0, "a destroyed pool keeps no listener")
      assert(global.numberOfAvailableSegments == 10)
    }
  }

  test("usage is the share of the pool's buffers in use") {
    withNetworkBufferPool(10) { global =>
      val pool = global.createBufferPool(4, 4, "metrics")
      assert(pool.usage == 0f)
      val a = pool.requestBuffer()
      val b = pool.requestBuffer()
      assert(pool.usage == 0.5f)
      assert(pool.numUsedBuffers == 2)
      val c = pool.requestBuffer()
      val d = pool.requestBuffer()
      assert(pool.usage == 1f)
      Seq(a, b).foreach(_.release())
      assert(pool.usage == 0.5f)
      assert(pool.numRequestedSegments == 4, "free segments stay with the pool")
      Seq(c, d).foreach(_.release())
      assert(pool.usage == 0f)
      assert(pool.toString.contains("metrics"))
      pool.lazyDestroy()
    }
  }
}
