package io.sluice.metrics

import io.sluice.NettyLeakDetection
import org.scalatest.funsuite.AnyFunSuite

class RateMeterSuite extends AnyFunSuite with NettyLeakDetection {

  private val s = 1000000000L

  test("the rate is the growth over the window's time span, per second") {
    val m = new RateMeter(windowSamples = 2, startNanos = 0L)
    assert(m.update(1 * s, 10) == 10.0)
    assert(m.update(2 * s, 30) == 15.0) // (30 - 0) / 2 s
    assert(m.update(3 * s, 30) == 10.0) // (30 - 10) / 2 s: the first sample left the window
    assert(m.update(4 * s, 30) == 0.0)
  }

  test("a task shorter than one tick gets its average over its life; time standing still changes nothing") {
    val m = new RateMeter(windowSamples = 5, startNanos = 10 * s)
    assert(m.rate == 0.0)
    assert(m.update(10 * s + s / 4, 100) == 400.0)
    assert(m.update(10 * s + s / 4, 500) == 400.0)
  }

  test("a decreasing total never gives a negative rate") {
    val m = new RateMeter(windowSamples = 1, startNanos = 0L, startCount = 50)
    assert(m.update(s, 10) == 0.0)
  }
}
