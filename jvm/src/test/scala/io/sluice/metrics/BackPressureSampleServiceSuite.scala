package io.sluice.metrics

import java.util.concurrent.{CountDownLatch, TimeUnit}

import io.sluice.NettyLeakDetection
import io.sluice.TestingShuffleEnvironment._
import io.sluice.memory.NetworkBufferPool
import io.sluice.partition.ResultPartitionID
import org.scalatest.funsuite.AnyFunSuite

class BackPressureSampleServiceSuite extends AnyFunSuite with NettyLeakDetection {

  private val service = new BackPressureSampleService()
  private val key = TaskKey(1, 0, 0, 1L)

  private def awaitWaiting(t: Thread): Unit = {
    val deadline = System.nanoTime() + 10000000000L
    while (t.getState != Thread.State.TIMED_WAITING && t.getState != Thread.State.WAITING && System.nanoTime() < deadline) {
      Thread.sleep(2)
    }
    assert(t.getState == Thread.State.TIMED_WAITING || t.getState == Thread.State.WAITING, s"$t is ${t.getState}")
  }

  test("a thread blocked in LocalBufferPool.requestBufferBlocking is counted in every sample") {
    val global = new NetworkBufferPool(4, 4096)
    val pool = global.createBufferPool(1, 1, "test pool")
    val held = pool.requestBuffer()
    val producer = new Thread(() => { pool.requestBufferBlocking(60000L).release() }, "blocked producer")
    producer.start()
    awaitWaiting(producer)
    val samples = service.sample(() => Map(key -> producer), numSamples = 5, delayMs = 5, timeLimitMs = 10000)
    assert(samples == Seq(TaskSample(key, 5, 5)))
    assert(BackPressureLevel.of(samples.head.ratio) == BackPressureLevel.High)
    held.release()
    producer.join(10000)
    assert(!producer.isAlive)
    global.destroy()
  }

  test("a thread waiting for anything else (input, sleep) is not backpressured") {
    val latch = new CountDownLatch(1)
    val idle = new Thread(() => latch.await(60, TimeUnit.SECONDS), "idle task")
    idle.start()
    awaitWaiting(idle)
    val samples = service.sample(() => Map(key -> idle), numSamples = 4, delayMs = 5, timeLimitMs = 10000)
    assert(samples == Seq(TaskSample(key, 0, 4)))
    latch.countDown()
    idle.join(10000)
  }

  test("sampling is bounded in time; a task that ended keeps the samples it had") {
    val latch = new CountDownLatch(1)
    val t = new Thread(() => latch.await(60, TimeUnit.SECONDS), "short task")
    t.start()
    val start = System.nanoTime()
    val samples = service.sample(() => if (System.nanoTime() - start < 50000000L) Map(key -> t) else Map.empty,
      numSamples = 100000, delayMs = 10, timeLimitMs = 300)
    val took = (System.nanoTime() - start) / 1000000L
    assert(took < 2000, s"sampling took ${took}ms")
    assert(samples.size == 1 && samples.head.total >= 1 && samples.head.total < 100)
    latch.countDown()
    t.join(10000)
  }

  test("engine-level HIGH: a pipelined producer with a slow local consumer is blocked and backpressured") {
    withEnvironment() { env =>
      val id = ResultPartitionID(7, 0)
      val p = env.createPipelinedPartition(id, 1)
      env.registerPartition(p)
      val group = env.metrics.group(key)
      group.attachPartition(p)
      @volatile var written = 0
      val producer = new Thread(() => {
          try {
            (1 to 600).foreach { _ => p.emitRecord(0, record(1000), ByteArrayOffset, 1000); written += 1 }
            p.finish()
          } catch { case _: Throwable => () }
        }, "fast producer")
      val g = gate(env, 0, id)
      val readerGroup = env.metrics.group(TaskKey(2, 0, 0, 2L))
      readerGroup.attachInputGate(g)
      val consumer = new Thread(() => {
          drain(g, onRecord = () => { readerGroup.numRecordsIn.inc(); Thread.sleep(2) }) // the slow receiver
          ()
        }, "slow consumer")
      producer.start()
      consumer.start()
      Thread.sleep(300)
      val samples = service.sample(() => Map(key -> producer), numSamples = 20, delayMs = 10, timeLimitMs = 10000)
      val ratio = samples.head.ratio
      assert(BackPressureLevel.of(ratio) == BackPressureLevel.High, s"ratio $ratio")
      val writerSnapshot = group.sample()
      val readerSnapshot = readerGroup.sample()
      assert(writerSnapshot.backPressuredTimeMsPerSecond > 500, writerSnapshot)
      assert(writerSnapshot.outPoolUsage >= 0.8, writerSnapshot) // the consumer's queue holds the pool
      assert(writerSnapshot.numRecordsOut >= readerSnapshot.numRecordsIn)
      // Read together, as the driver does: local channels, upstream backpressured -> slow receiver.
      val cause = NetworkDiagnosis.rootCause(Seq(readerSnapshot), Seq(writerSnapshot))
      assert(cause.contains("slow receiver"), cause)
      producer.join(60000)
      consumer.join(60000)
      assert(written == 600 && readerGroup.numRecordsIn.count == 600)
    }
  }
}
