package io.sluice.memory

import java.util.concurrent.{CyclicBarrier, TimeoutException}

import io.sluice.NettyLeakDetection
import io.sluice.TestingThreads._
import io.sluice.memory.TestingBufferPools._
import org.scalatest.funsuite.AnyFunSuite

class NetworkBufferPoolSuite extends AnyFunSuite with NettyLeakDetection {

  test("segments are allocated lazily, on first request, and reused after") {
    withNetworkBufferPool(16) { global =>
      assert(global.numberOfAllocatedSegments == 0)
      val pool = global.createBufferPool(1, 16, "lazy")
      assert(global.numberOfAllocatedSegments == 0)
      assert(global.numberOfAvailableSegments == 16)
      val a = pool.requestBuffer()
      assert(global.numberOfAllocatedSegments == 1)
      assert(global.numberOfAvailableSegments == 15)
      assert(a.capacity() == 4096)
      assert(a.readableBytes() == 0 && a.writableBytes() == 4096)
      a.release()
      val b = pool.requestBuffer()
      assert(b.segment eq a.segment, "a recycled segment is reused before a new one is allocated")
      assert(global.numberOfAllocatedSegments == 1)
      b.release()
      pool.lazyDestroy()
      assert(global.numberOfAllocatedSegments == 1, "segments are kept for reuse, not freed")
    }
  }

  test("a pool gets at least its required and at most its maximum number of segments") {
    withNetworkBufferPool(16) { global =>
      val small = global.createBufferPool(2, 5, "small")
      assert(small.numBuffers == 5, "alone, a pool grows to its maximum, not to the whole executor")
      val held = Seq.fill(5)(small.requestBuffer())
      assert(held.forall(_ != null))
      assert(small.requestBuffer() == null, "the pool may not grow beyond its maximum")
      assert(global.numberOfAvailableSegments == 11)

      val big = global.createBufferPool(3, 100, "big")
      assert(small.numBuffers == 5)
      assert(big.numBuffers == 11, "the other pool takes what is left")

      val fixed = global.createBufferPool(10, 10, "fixed")
      assert(fixed.numBuffers == 10)
      assert(global.numberOfRequiredSegments == 15)
      // One segment is nobody's minimum: it goes to one of the pools that have room.
      assert(small.numBuffers + big.numBuffers == 6)
      assert(small.numBuffers >= 2 && big.numBuffers >= 3)
      held.foreach(_.release())
      assert(small.numRequestedSegments <= small.numBuffers, "a shrunk pool gave its excess back")
      Seq(small, big, fixed).foreach(_.lazyDestroy())
    }
  }

  test("bad pool bounds are refused") {
    withNetworkBufferPool(4) { global =>
      intercept[IllegalArgumentException](global.createBufferPool(3, 2, "inverted"))
      intercept[IllegalArgumentException](global.createBufferPool(-1, 2, "negative"))
      intercept[IllegalArgumentException](global.createBufferPool(0, 0, "empty"))
      assert(global.numberOfPools == 0)
    }
  }

  test("pools with equal bounds get fair shares that differ by at most one") {
    withNetworkBufferPool(100) { global =>
      val pools = (1 to 3).map(i => global.createBufferPool(2, 1000, s"p$i"))
      val sizes = pools.map(_.numBuffers)
      assert(sizes.sum == 100, sizes)
      assert(sizes.max - sizes.min <= 1, sizes)

      // Exclusive segments are taken out of what is shared.
      val exclusive = global.requestUnpooledSegments(10, 1000, "channel")
      val after = pools.map(_.numBuffers)
      assert(after.sum == 90, after)
      assert(after.max - after.min <= 1, after)

      val fourth = global.createBufferPool(1, 1000, "p4")
      val four = (pools :+ fourth).map(_.numBuffers)
      assert(four.sum == 90, four)
      assert(four.max - four.min <= 2, "shares are equal above each pool's minimum")
      val extras = four.zip(Seq(2, 2, 2, 1)).map { case (n, min) => n - min }
      assert(extras.max - extras.min <= 1, extras)

      global.recycleUnpooledSegments(exclusive)
      assert((pools :+ fourth).map(_.numBuffers).sum == 100)
      (pools :+ fourth).foreach(_.lazyDestroy())
    }
  }

  test("shares are water-filled around a pool whose maximum is below its share") {
    withNetworkBufferPool(100) { global =>
      val capped = global.createBufferPool(1, 5, "capped")
      val a = global.createBufferPool(1, 1000, "a")
      val b = global.createBufferPool(1, 1000, "b")
      assert(capped.numBuffers == 5)
      assert(a.numBuffers + b.numBuffers == 95)
      assert(math.abs(a.numBuffers - b.numBuffers) <= 1)

      val c = global.createBufferPool(1, 40, "c")
      assert(capped.numBuffers == 5)
      assert(Seq(a, b, c).map(_.numBuffers).sum == 95)
      assert(c.numBuffers <= 40)
      assert(Seq(a, b, c).map(_.numBuffers).max - Seq(a, b, c).map(_.numBuffers).min <= 1)
      Seq(capped, a, b, c).foreach(_.lazyDestroy())
    }
  }

  test("a requirement that can never fit fails at once, naming spark.sluice.network.memory") {
    withNetworkBufferPool(10) { global =>
      val e = intercept[InsufficientNetworkBuffersException](global.createBufferPool(11, 11, "huge gate", 600000L))
      assert(e.getMessage.contains("huge gate") && e.getMessage.contains("needs at least 11"), e.getMessage)
      assert(e.getMessage.contains("spark.sluice.network.memory"), e.getMessage)
      val e2 = intercept[InsufficientNetworkBuffersException](global.requestUnpooledSegments(11, 600000L, "remote channel 7"))
      assert(e2.getMessage.contains("remote channel 7") && e2.getMessage.contains("spark.sluice.network.memory"))
      assert(global.numberOfPools == 0)
      assert(global.numberOfRequiredSegments == 0)
    }
  }

  test("a requirement that does not fit now waits until another pool gives its minimum back") {
    withNetworkBufferPool(10) { global =>
      val first = global.createBufferPool(8, 8, "first")
      val gate = fork("second gate")(global.createBufferPool(3, 3, "second gate", 600000L))
      val channel = fork("remote channel")(global.requestUnpooledSegments(3, 600000L, "remote channel"))
      gate.awaitWaiting(); channel.awaitWaiting()
      assert(global.numberOfRequiredSegments == 8 && global.numberOfPools == 1, "the waiting requests reserved nothing")
      assert(global.tryRequestUnpooledSegments(1) == null, "an opportunistic request does not jump the queue")
      first.lazyDestroy()
      val second = gate.join()
      val segments = channel.join()
      assert(second.numBuffers == 3 && segments.size == 3)
      assert(global.numberOfRequiredSegments == 6)
      second.lazyDestroy()
      global.recycleUnpooledSegments(segments)
    }
  }

  test("a requirement that stays taken times out, naming its owner and spark.sluice.network.bufferRequestTimeout") {
    withNetworkBufferPool(4) { global =>
      val first = global.createBufferPool(3, 3, "first")
      val e = intercept[TimeoutException](global.createBufferPool(2, 2, "late gate", 50L))
      assert(e.getMessage.contains("late gate") && e.getMessage.contains("spark.sluice.network.bufferRequestTimeout"),
        e.getMessage)
      val e2 = intercept[TimeoutException](global.requestUnpooledSegments(2, 50L, "late channel"))
      assert(e2.getMessage.contains("late channel") && e2.getMessage.contains("spark.sluice.network.bufferRequestTimeout"))
      assert(global.numberOfRequiredSegments == 3 && global.numberOfPools == 1)
      first.lazyDestroy()
    }
  }

  test("an interrupted wait gives back every requirement and segment it took") {
    withNetworkBufferPool(10) { global =>
      // Waiting for room: nothing is reserved yet.
      val first = global.createBufferPool(8, 8, "first")
      val roomWaiter = fork("waits for room")(global.createBufferPool(5, 5, "second", 600000L))
      roomWaiter.awaitWaiting()
      roomWaiter.thread.interrupt()
      assert(roomWaiter.failure().isInstanceOf[InterruptedException])
      assert(global.numberOfRequiredSegments == 8 && global.numberOfPools == 1)
      first.lazyDestroy()

      // Waiting for segments: the requirement is reserved and one segment already taken.
      val pool = global.createBufferPool(1, 10, "producer")
      val held = Seq.fill(10)(pool.requestBuffer())
      val segmentWaiter = fork("waits for segments")(global.requestUnpooledSegments(4, 600000L, "channel"))
      eventually(what = "the pool to shrink")(pool.numBuffers == 6)
      held.head.release() // over its size: the segment goes to the global pool, and to the waiting request
      eventually(what = "the request to take the segment")(global.numberOfAvailableSegments == 0)
      segmentWaiter.awaitWaiting()
      segmentWaiter.thread.interrupt()
      assert(segmentWaiter.failure().isInstanceOf[InterruptedException])
      assert(global.numberOfRequiredSegments == 1)
      assert(global.numberOfAvailableSegments == 1, "the segment it took came back")
      assert(pool.numBuffers == 10, "the pool grows back")
      held.tail.foreach(_.release())
      pool.lazyDestroy()
    }
  }

  test("an opportunistic request takes only segments free now, and leaves a quarter of the executor to others") {
    withNetworkBufferPool(8) { global =>
      val a = global.tryRequestUnpooledSegments(2)
      val b = global.tryRequestUnpooledSegments(4)
      assert(a.size == 2 && b.size == 4)
      assert(global.tryRequestUnpooledSegments(1) == null, "beyond three quarters of the executor's segments")
      assert(global.numberOfRequiredSegments == 6)
      val c = global.requestUnpooledSegments(2, 600000L, "a gate's first channel") // may use anything that fits
      Seq(a, b, c).foreach(global.recycleUnpooledSegments)
      val pool = global.createBufferPool(1, 8, "holds everything")
      val held = Seq.fill(8)(pool.requestBuffer())
      assert(global.tryRequestUnpooledSegments(1) == null, "no segment is free right now")
      assert(global.numberOfRequiredSegments == 1 && pool.numBuffers == 8, "a failed try changes nothing")
      held.foreach(_.release())
      pool.lazyDestroy()
    }
  }

  test("exclusive segments count as required and make the pools shrink, and grow back when returned") {
    withNetworkBufferPool(20) { global =>
      val pool = global.createBufferPool(1, 100, "floating")
      assert(pool.numBuffers == 20)
      val exclusive = global.requestUnpooledSegments(5, 1000, "channel")
      assert(exclusive.size == 5)
      assert(global.numberOfRequiredSegments == 1 + 5, "the pool's minimum and the exclusive segments")
      assert(pool.numBuffers == 15)
      assert(global.numberOfAvailableSegments == 15)
      val distinct = new java.util.IdentityHashMap[MemorySegment, Boolean]()
      exclusive.forEach(s => distinct.put(s, true))
      assert(distinct.size == 5)
      global.recycleUnpooledSegments(exclusive)
      assert(global.numberOfRequiredSegments == 1)
      assert(pool.numBuffers == 20)
      pool.lazyDestroy()
    }
  }

  test("an exclusive request waits until a pool gives back the excess it had to shed") {
    withNetworkBufferPool(10) { global =>
      val pool = global.createBufferPool(1, 10, "producer")
      val held = Seq.fill(10)(pool.requestBuffer())
      assert(held.forall(_ != null))
      val requester = fork("exclusive requester")(global.requestUnpooledSegments(4, 60000, "channel"))
      eventually(what = "the pool to shrink")(pool.numBuffers == 6)
      requester.awaitWaiting()
      held.take(4).foreach(_.release())
      val got = requester.join()
      assert(got.size == 4)
      assert(pool.numRequestedSegments == 6)
      held.drop(4).foreach(_.release())
      global.recycleUnpooledSegments(got)
      pool.lazyDestroy()
    }
  }

  test("an exclusive request that times out names its owner and gives back what it took") {
    withNetworkBufferPool(4) { global =>
      val pool = global.createBufferPool(1, 4, "busy producer")
      val held = Seq.fill(4)(pool.requestBuffer())
      held.head.release() // one segment goes back to the global pool: the request takes it, then waits
      val e = intercept[TimeoutException](global.requestUnpooledSegments(2, 100, "slow channel"))
      assert(e.getMessage.contains("slow channel"))
      assert(e.getMessage.contains("spark.sluice.network.bufferRequestTimeout"))
      assert(global.numberOfRequiredSegments == 1)
      assert(pool.numBuffers == 4, "the pool grows back once the request gave up")
      held.tail.foreach(_.release())
      pool.lazyDestroy()
    }
  }

  test("a segment coming back to the executor reaches every pool waiting for one") {
    withNetworkBufferPool(3) { global =>
      // `shrinking` holds all three segments when two more pools arrive and take its share.
      val shrinking = global.createBufferPool(1, 3, "shrinking")
      val held = Seq.fill(3)(shrinking.requestBuffer())
      val a = global.createBufferPool(1, 1, "a")
      val b = global.createBufferPool(1, 1, "b")
      assert(Seq(shrinking, a, b).map(_.numBuffers) == Seq(1, 1, 1))
      // a asks first and gives up (no listener); b waits with a listener.
      assert(a.requestBuffer() == null)
      val listener = new TestingBufferListener
      assert(b.requestBufferOrListen(listener) == null)
      held.head.release() // shrinking is over its size: the segment goes back to the global pool
      assert(listener.received.get == 1, "the waiting pool's listener got the segment")
      listener.buffers.forEach(_.release())
      held.tail.foreach(_.release())
      Seq(shrinking, a, b).foreach(_.lazyDestroy())
    }
  }

  test("concurrent pool creation and destruction leaves every pool with its fair size") {
    withNetworkBufferPool(64) { global =>
      val stay = global.createBufferPool(1, 1000, "stays")
      val threads = 2
      val rounds = 500
      val barrier = new CyclicBarrier(threads)
      // In each round both threads create a pool, then destroy it at the same moment: whichever
      // redistribution is computed last must be the one that sticks.
      val workers = (0 until threads).map { t =>
        fork(s"pool churn $t") {
          (0 until rounds).map { i =>
            barrier.await()
            val p = global.createBufferPool(1 + (i % 3), 10 + t, s"churn $t/$i")
            val b = p.requestBuffer()
            if (b != null) b.release()
            barrier.await()
            p.lazyDestroy()
            barrier.await()
            stay.numBuffers
          }
        }
      }
      val seen = workers.map(_.join())
      assert(global.numberOfPools == 1)
      val wrong = seen.flatten.count(_ != 64)
      assert(wrong == 0, s"$wrong times the remaining pool was left with a stale size: $stay")
      assert(stay.numBuffers == 64)
      stay.lazyDestroy()
    }
  }

  test("destroying the executor's pool refuses new pools and drops segments coming back") {
    val global = new NetworkBufferPool(4, 4096)
    val pool = global.createBufferPool(1, 4, "late")
    val b = pool.requestBuffer()
    global.destroy()
    intercept[IllegalStateException](global.createBufferPool(1, 1, "after"))
    intercept[IllegalStateException](global.requestUnpooledSegments(1, 10, "after"))
    b.release()
    pool.lazyDestroy()
    assert(global.numberOfPools == 0)
  }
}
