package io.sluice

import java.util.concurrent.ConcurrentLinkedQueue

import scala.jdk.CollectionConverters._

import io.netty.buffer.Unpooled
import io.sluice.memory.NetworkBufferPool
import org.scalatest.{Args, Reporter}
import org.scalatest.events.{Event, TestFailed, TestSucceeded}
import org.scalatest.funsuite.AnyFunSuite

/** The leak check the JVM tests mix in sees a deliberate leak and fails the test that leaked, and only that one. */
class NettyLeakDetectionSuite extends AnyFunSuite with NettyLeakDetection {

  /** Leaks from a method of its own, so nothing on the test's stack keeps the buffers reachable. */
  private def dropWithoutRelease(pool: NetworkBufferPool): Unit = {
    Unpooled.directBuffer(64).writeLong(42L)
    pool.createBufferPool(1, 2, "leaky test pool").requestBuffer().writeInt(7)
  }

  test("a test that drops a Netty buffer or a network buffer without releasing it fails, naming what leaked") {
    val global = new NetworkBufferPool(4, 4096)
    val leaky = new AnyFunSuite with NettyLeakDetection {
      test("leaks") { dropWithoutRelease(global) }
      test("releases what it takes") {
        Unpooled.directBuffer(64).release()
        val pool = global.createBufferPool(1, 1, "tidy test pool")
        pool.requestBuffer().release()
        pool.lazyDestroy()
      }
    }
    val events = new ConcurrentLinkedQueue[Event]()
    val reporter = new Reporter { override def apply(e: Event): Unit = events.add(e) }
    leaky.run(None, Args(reporter))
    val failed = events.asScala.collect { case f: TestFailed => f }.toSeq
    val succeeded = events.asScala.collect { case s: TestSucceeded => s.testName }.toSeq
    assert(failed.map(_.testName) == Seq("leaks"), failed.map(_.message))
    assert(succeeded == Seq("releases what it takes"))
    val message = failed.head.message
    assert(message.contains("2 Netty buffer(s) leaked"), message)
    assert(message.contains("NetworkBuffer was garbage-collected") && message.contains("ByteBuf was garbage-collected"), message)
    assert(message.contains("dropWithoutRelease"), s"the report shows where the buffers were taken: $message")
    global.destroy()
  }
}
