package io.sluice.partition.consumer

import io.sluice.TestingThreads
import org.scalatest.funsuite.AnyFunSuite

/** A gate's input counters: bytes as they travelled and as the task got them, and idle time. */
class InputGateMetricsSuite extends AnyFunSuite {

  test("local buffers count as buffers and bytes, remote ones as bytes (frames are counted as they arrive)") {
    val m = new InputGateMetrics(() => Array.empty)
    m.countBuffer(remote = false, size = 100, decoded = 300)
    m.countBuffer(remote = true, size = 50, decoded = 50)
    assert(m.numBytesInLocal.sum == 100 && m.numBuffersInLocal.sum == 1)
    assert(m.numBytesInRemote.sum == 50 && m.numBuffersInRemote.sum == 0)
    assert(m.numBytesIn.sum == 350, "what the task got: decompressed")
    assert(m.inputQueueLength == 0 && m.numExclusiveBuffers == 0, "no channels, nothing queued")
  }

  test("idle time counts a wait while it goes on and once it ended") {
    val m = new InputGateMetrics(() => Array.empty)
    val release = new java.util.concurrent.CountDownLatch(1)
    val waiter = TestingThreads.fork("idle task")(m.whileIdle(release.await()))
    TestingThreads.eventually(what = "the wait to show")(m.idleTimeNanosNow > 0)
    assert(m.idleTimeNanos.sum == 0, "not ended yet")
    release.countDown()
    waiter.join()
    assert(m.idleTimeNanos.sum > 0 && m.idleTimeNanosNow == m.idleTimeNanos.sum)
  }
}
