package io.sluice.partition

import java.util.concurrent.{ConcurrentLinkedQueue, CountDownLatch, TimeUnit}

import scala.jdk.CollectionConverters._

import io.sluice.TestingThreads
import io.sluice.memory.NetworkBuffer
import org.scalatest.funsuite.AnyFunSuite

/**
 * The read scheduler: rounds of queued reads, each in file and offset order; reads run only with a
 * read buffer, wait (queued, counted) while every buffer holds a frame, and start again when one
 * comes back; threads bounded, started on demand.
 */
class PartitionReadSchedulerSuite extends AnyFunSuite {

  private def withScheduler(threads: Int = 1, buffers: Int = 16)(body: PartitionReadScheduler => Unit): Unit = {
    val s = new PartitionReadScheduler(threads, "test", buffers, 4096)
    try body(s)
    finally assert(s.shutdown(10000), "every read thread ended")
  }

  private def read(body: => Unit): PartitionReadScheduler.Read = _ => body

  /** Occupies the scheduler's only thread until `gate` opens; returns once that read has started. */
  private def holdTheThread(s: PartitionReadScheduler, gate: CountDownLatch): Unit = {
    val started = new CountDownLatch(1)
    assert(s.submit(read { started.countDown(); gate.await() }, 0, 0L, 0L))
    assert(started.await(30, TimeUnit.SECONDS), "the first read started")
  }

  test("queued reads run in file and offset order, not in the order they were submitted") {
    withScheduler() { s =>
      val gate = new CountDownLatch(1)
      val order = new ConcurrentLinkedQueue[String]()
      val done = new CountDownLatch(6)
      holdTheThread(s, gate) // while the others queue
      def submit(name: String, shuffle: Int, producer: Long, offset: Long): Unit =
        assert(s.submit(read { order.add(name); done.countDown() }, shuffle, producer, offset))
      submit("p5@0", 1, 5L, 0L)
      submit("p2@4096", 1, 2L, 4096L)
      submit("p2@100", 1, 2L, 100L)
      submit("s0", 0, 9L, 0L)
      submit("p2@0", 1, 2L, 0L)
      submit("p3@70", 1, 3L, 70L)
      assert(s.numQueued == 6)
      gate.countDown()
      assert(done.await(30, TimeUnit.SECONDS))
      assert(order.asScala.toSeq == Seq("s0", "p2@0", "p2@100", "p2@4096", "p3@70", "p5@0"))
      assert(s.numQueued == 0)
    }
  }

  test("a read submitted during a round waits for that round, however early its file comes") {
    withScheduler() { s =>
      val gate = new CountDownLatch(1)
      val order = new ConcurrentLinkedQueue[String]()
      val done = new CountDownLatch(4)
      holdTheThread(s, gate)
      def submit(name: String, producer: Long)(andThen: => Unit): Unit =
        assert(s.submit(read { order.add(name); andThen; done.countDown() }, 1, producer, 0L))
      // The first read of the round submits a read of an earlier file: it goes after the round.
      submit("p1", 1L)(submit("p0, next round", 0L)(()))
      submit("p2", 2L)(())
      submit("p3", 3L)(())
      gate.countDown()
      assert(done.await(30, TimeUnit.SECONDS))
      assert(order.asScala.toSeq == Seq("p1", "p2", "p3", "p0, next round"))
    }
  }

  test("reads wait while every read buffer holds a frame, and start again when one comes back") {
    withScheduler(threads = 2, buffers = 2) { s =>
      val frames = new ConcurrentLinkedQueue[NetworkBuffer]()
      val ran = new ConcurrentLinkedQueue[String]()
      def frameRead(name: String): PartitionReadScheduler.Read = buffers => {
        val b = buffers.take()
        assert(b != null, s"$name ran without a buffer")
        ran.add(name)
        frames.add(b) // the frame waits for the network
      }
      (0 until 2).foreach(i => assert(s.submit(frameRead(s"r$i"), 0, i.toLong, 0L)))
      TestingThreads.eventually(what = "the first two reads ran")(ran.size == 2 && s.numBuffersInUse == 2)
      (2 until 5).foreach(i => assert(s.submit(frameRead(s"r$i"), 0, i.toLong, 0L)))
      Thread.sleep(300) // nothing may run without a buffer
      assert(ran.size == 2 && s.numQueued == 3, s"${ran.asScala} ran with both buffers out")
      frames.poll().release() // one frame was sent: its buffer starts the next read
      TestingThreads.eventually(what = "a read ran with the buffer that came back")(ran.size == 3)
      assert(s.numQueued == 2 && s.numBuffersInUse == 2)
      frames.poll().release()
      frames.poll().release()
      TestingThreads.eventually(what = "every read ran")(ran.size == 5)
      assert(s.waitTimeMs >= 300, "the waits were counted")
      frames.asScala.foreach(_.release())
      TestingThreads.eventually(what = "every buffer came back")(s.numBuffersInUse == 0)
    }
  }

  test("a read takes buffers for as many frames as are free; the first one is always there") {
    withScheduler(buffers = 3) { s =>
      val taken = new ConcurrentLinkedQueue[NetworkBuffer]()
      val done = new CountDownLatch(1)
      assert(s.submit(buffers => {
          var b = buffers.take()
          while (b != null) { taken.add(b); b = buffers.take() }
          done.countDown()
        }, 0, 0L, 0L))
      assert(done.await(30, TimeUnit.SECONDS))
      assert(taken.size == 3 && s.numBuffersInUse == 3)
      taken.asScala.foreach(_.release())
      assert(s.numBuffersInUse == 0)
    }
  }

  test("threads start as reads queue, at most numThreads, and end with the scheduler") {
    val s = new PartitionReadScheduler(3, "bounded", 16, 4096)
    val gate = new CountDownLatch(1)
    val running = new java.util.concurrent.atomic.AtomicInteger
    val most = new java.util.concurrent.atomic.AtomicInteger
    val done = new CountDownLatch(10)
    try {
      assert(s.numThreadsAlive == 0, "no thread before the first read")
      (0 until 10).foreach { i =>
        assert(s.submit(read {
            val n = running.incrementAndGet()
            most.accumulateAndGet(n, math.max)
            gate.await(30, TimeUnit.SECONDS)
            running.decrementAndGet()
            done.countDown()
          }, 0, i.toLong, 0L))
      }
      TestingThreads.eventually(what = "three reads run at once")(running.get == 3)
      assert(s.numQueued == 7)
      gate.countDown()
      assert(done.await(30, TimeUnit.SECONDS))
      assert(most.get == 3, s"${most.get} reads ran at once on 3 threads")
    } finally assert(s.shutdown(10000))
    assert(
      !Thread.getAllStackTraces.keySet.asScala.exists(_.getName.startsWith(s"${PartitionReadScheduler.ThreadPrefix}bounded-")))
    assert(!s.submit(read(()), 0, 0L, 0L), "a shut down scheduler takes no reads")
  }
}
