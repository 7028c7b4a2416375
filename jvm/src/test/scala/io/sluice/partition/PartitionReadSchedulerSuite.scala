package io.sluice.partition

import java.util.concurrent.{ConcurrentLinkedQueue, CountDownLatch, TimeUnit}

import scala.jdk.CollectionConverters._

import org.scalatest.funsuite.AnyFunSuite

/** The read scheduler's order: rounds of queued reads, each in file and offset order. */
class PartitionReadSchedulerSuite extends AnyFunSuite {

  private def withScheduler(body: PartitionReadScheduler => Unit): Unit = {
    val s = new PartitionReadScheduler(1, "test")
    try body(s)
    finally assert(s.shutdown(10000), "every read thread ended")
  }

  /** Occupies the scheduler's only thread until `gate` opens; returns once that read has started. */
  private def holdTheThread(s: PartitionReadScheduler, gate: CountDownLatch): Unit = {
    val started = new CountDownLatch(1)
    assert(s.submit(() => { started.countDown(); gate.await() }, 0, 0L, 0L))
    assert(started.await(30, TimeUnit.SECONDS), "the first read started")
  }

  test("queued reads run in file and offset order, not in the order they were submitted") {
    withScheduler { s =>
      val gate = new CountDownLatch(1)
      val order = new ConcurrentLinkedQueue[String]()
      val done = new CountDownLatch(6)
      holdTheThread(s, gate) // while the others queue
      def read(name: String, shuffle: Int, producer: Long, offset: Long): Unit =
        assert(s.submit(() => { order.add(name); done.countDown() }, shuffle, producer, offset))
      read("p5@0", 1, 5L, 0L)
      read("p2@4096", 1, 2L, 4096L)
      read("p2@100", 1, 2L, 100L)
      read("s0", 0, 9L, 0L)
      read("p2@0", 1, 2L, 0L)
      read("p3@70", 1, 3L, 70L)
      assert(s.numQueued == 6)
      gate.countDown()
      assert(done.await(30, TimeUnit.SECONDS))
      assert(order.asScala.toSeq == Seq("s0", "p2@0", "p2@100", "p2@4096", "p3@70", "p5@0"))
    }
  }

  test("a read submitted during a round waits for that round, however early its file comes") {
    withScheduler { s =>
      val gate = new CountDownLatch(1)
      val order = new ConcurrentLinkedQueue[String]()
      val done = new CountDownLatch(4)
      holdTheThread(s, gate)
      def read(name: String, producer: Long)(andThen: => Unit): Unit =
        assert(s.submit(() => { order.add(name); andThen; done.countDown() }, 1, producer, 0L))
      // The first read of the round submits a read of an earlier file: it goes after the round.
      read("p1", 1L)(read("p0, next round", 0L)(()))
      read("p2", 2L)(())
      read("p3", 3L)(())
      gate.countDown()
      assert(done.await(30, TimeUnit.SECONDS))
      assert(order.asScala.toSeq == Seq("p1", "p2", "p3", "p0, next round"))
    }
  }

  test("read-ahead room: taken by frames read, given back as they leave") {
    val s = new PartitionReadScheduler(1, "test", readAheadBytes = 100)
    try {
      assert(s.hasReadAheadRoom)
      s.addReadAhead(60); assert(s.hasReadAheadRoom)
      s.addReadAhead(60); assert(!s.hasReadAheadRoom && s.readAheadNow == 120)
      s.addReadAhead(-60); assert(s.hasReadAheadRoom)
    } finally assert(s.shutdown(10000))
  }
}
