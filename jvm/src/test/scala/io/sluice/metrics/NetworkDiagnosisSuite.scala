package io.sluice.metrics

import io.sluice.NettyLeakDetection
import io.sluice.metrics.NetworkDiagnosis._
import io.sluice.metrics.TestingSnapshots._
import org.scalatest.funsuite.AnyFunSuite

class NetworkDiagnosisSuite extends AnyFunSuite with NettyLeakDetection {

  private val low = 0.1
  private val high = 1.0

  private def cause(tasks: Seq[TaskIOSnapshot], upstream: Seq[TaskIOSnapshot]): String = rootCause(tasks, upstream)

  // ---- "Flink Network Stack Vol. 2", first table: inPoolUsage x outPoolUsage -------------------

  test("in low, out low: no backpressure") {
    assert(cause(Seq(consumer(floating = low)), Seq(producer(outPoolUsage = low))) ==
      "No backpressure indicated: pool usages are low.")
  }

  test("in low, out high: backpressured by downstream, temporary") {
    val c = cause(Seq(consumer(floating = low, outPoolUsage = high, outputType = "pipelined")), Seq(producer(outPoolUsage = low)))
    assert(c.contains("backpressured by its downstream") && c.contains("temporary"), c)
  }

  test("in high, out low, all upstream low: may eventually cause backpressure") {
    val c = cause(Seq(consumer(floating = high)), Seq(producer(outPoolUsage = low)))
    assert(c.contains("may eventually"), c)
  }

  test("in high, any upstream out high: the likely source of backpressure (slow receiver)") {
    val c = cause(Seq(consumer(floating = high), consumer(partitionId = 1, floating = high)),
      Seq(producer(outPoolUsage = low), producer(partitionId = 1, outPoolUsage = high)))
    assert(c.contains("slow receiver") && c.contains("likely source"), c)
  }

  test("in high, out high: forwarding backpressure upstream") {
    val c = cause(Seq(consumer(floating = high, outPoolUsage = high, outputType = "pipelined")),
      Seq(producer(outPoolUsage = high)))
    assert(c.contains("forwards that backpressure upstream"), c)
  }

  // ---- "Flink Network Stack Vol. 2", second table: floating x exclusive x upstream outPoolUsage

  test("floating high, exclusive low, upstream high: only some input channels") {
    val c = cause(Seq(consumer(floating = high, exclusive = low)), Seq(producer(outPoolUsage = high)))
    assert(c.startsWith("Backpressure on only some of its input channels"), c)
  }

  test("floating high, exclusive high, upstream high: most or all input channels") {
    val c = cause(Seq(consumer(floating = high, exclusive = 0.8)), Seq(producer(outPoolUsage = high)))
    assert(c.startsWith("Backpressure on most or all of its input channels"), c)
  }

  test("floating high, upstream low: backpressure will eventually appear on some / most channels") {
    assert(cause(Seq(consumer(floating = high, exclusive = low)), Seq(producer(outPoolUsage = low)))
        .contains("eventually appear on only some of its input channels"))
    assert(cause(Seq(consumer(floating = high, exclusive = 0.9)), Seq(producer(outPoolUsage = low)))
        .contains("eventually appear on most or all of its input channels"))
  }

  test("all receivers low, an upstream producer high, remote input: potential network bottleneck") {
    val c = cause(Seq(consumer(floating = low), consumer(partitionId = 1, floating = low)),
      Seq(producer(outPoolUsage = high)))
    assert(c.contains("potential network bottleneck") && c.contains("buffersPerChannel"), c)
  }

  test("local channels only: upstream backpressure means a slow receiver, not the network") {
    val c = cause(Seq(consumer(remote = false)), Seq(producer(outPoolUsage = high)))
    assert(c.contains("local channels only") && c.contains("slow receiver"), c)
  }

  test("a producer blocked most of the time counts as backpressured even with a pool that is not full") {
    val blocked = producer(outPoolUsage = 0.3).copy(backPressuredTimeMsPerSecond = 800)
    assert(isBackPressured(blocked) && !isBackPressured(producer(outPoolUsage = 0.3)))
    assert(cause(Seq(consumer(remote = false)), Seq(blocked)).contains("slow receiver"))
  }

  test("skew: one task's inPoolUsage far above its siblings'") {
    val tasks = Seq(consumer(partitionId = 0, floating = 0.1), consumer(partitionId = 1, floating = 0.2),
      consumer(partitionId = 2, floating = 1.0), consumer(partitionId = 3, floating = 0.1))
    val c = cause(tasks, Seq(producer(outPoolUsage = high)))
    assert(c.startsWith("Skew: task 2.0 of stage 2"), c)
    assert(c.contains("100%") && c.contains("median is 10%"), c)
    // Every sibling as full as the top one: not skew but a uniformly slow stage.
    val uniform = tasks.map(_.copy(floatingBuffersUsage = 1.0, inPoolUsage = 1.0))
    assert(!cause(uniform, Seq(producer(outPoolUsage = high))).startsWith("Skew"))
  }

  test("a stage that only writes, and a stage without metrics") {
    assert(cause(Seq(producer(outPoolUsage = low)), Nil) == "No backpressure indicated: outPoolUsage is low.")
    assert(cause(Seq(producer(outPoolUsage = high)), Nil).contains("backpressured by its consumers"))
    assert(cause(Nil, Nil) == "No Sluice network metrics for this stage yet.")
  }

  test("a producer the stack sample found blocked is backpressured whatever its last metrics said") {
    // The metrics report and the sample are taken at different moments: a pool can be drained
    // right when the report is taken while the tasks spent most of the sample waiting for buffers.
    val sampled = rootCause(Seq(producer(outPoolUsage = low)), Nil, sampledBlocked = true)
    assert(sampled.contains("sampled waiting for output buffers") && sampled.contains("backpressured"), sampled)
    assert(rootCause(Seq(producer(outPoolUsage = low)), Nil) == "No backpressure indicated: outPoolUsage is low.")
  }

  // ---- buffer fill rate and the suggested buffer timeout --------------------------------------

  test("fill rate: numBytesInRemote / numBuffersInRemote over the segment size") {
    assert(fillRate(16384, 2, 32768).contains(0.25))
    assert(fillRate(0, 0, 32768).isEmpty)
  }

  test("suggested buffer timeout: low fill raises it to fill buffers to 80 %, capped at 1 s") {
    assert(suggestBufferTimeout(8192 * 10, 10, 32768, 100, pipelinedInput = true).contains(320.0)) // 25 % full
    assert(suggestBufferTimeout(1000 * 10, 10, 32768, 100, pipelinedInput = true).contains(1000.0)) // capped
    assert(suggestBufferTimeout(30000 * 10, 10, 32768, 100, pipelinedInput = true).contains(100.0)) // full: keep
    assert(suggestBufferTimeout(100 * 10, 10, 32768, 0, pipelinedInput = true).contains(1.0)) // per-record flushes
  }

  test("no suggestion without remote input, for blocking input, or when only full buffers are sent") {
    assert(suggestBufferTimeout(0, 0, 32768, 100, pipelinedInput = true).isEmpty)
    assert(suggestBufferTimeout(8192, 1, 32768, 100, pipelinedInput = false).isEmpty)
    assert(suggestBufferTimeout(8192, 1, 32768, -1, pipelinedInput = true).isEmpty)
    val d = diagnose(Seq(consumer(remote = true)), Seq(producer(outputType = "pipelined")), 100, 32768)
    assert(d.bufferFillRate.contains(1000.0 / 32768) && d.suggestedBufferTimeoutMs.contains(1000.0))
    assert(diagnose(Seq(consumer(remote = false)), Seq(producer()), 100, 32768).suggestedBufferTimeoutMs.isEmpty)
  }
}
