package io.sluice.netty

import java.util.concurrent.TimeoutException

import io.sluice.NettyLeakDetection
import io.sluice.config.SluiceOptions
import io.sluice.netty.TestingExecutor.{async, await, withExecutors}
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.GateInput
import org.scalatest.funsuite.AnyFunSuite

/**
 * The skew picture of "A Deep-Dive into Flink's Network Stack" on one shared connection: consumers B.3 and B.4 (two gates of executor B)
 * read from producers on executor A; B.4 stops consuming. With credit-based flow control only
 * B.4's logical channel stops (Inflicting Backpressure 2); without it, B.4's full buffer pool
 * stops reading the whole TCP connection and B.3 starves too (Inflicting Backpressure 1).
 */
class CreditBasedPartitionRequestClientHandlerSuite extends AnyFunSuite with NettyLeakDetection {

  // Small socket buffers, so a stalled connection fills up quickly and deterministically.
  private val smallSockets = Map("spark.sluice.io.receiveBuffer" -> "16384", "spark.sluice.io.sendBuffer" -> "16384")
  private val recordSize = 1000
  private val b3Records = 400
  private val b4Records = 2000

  private class Skew(creditBased: Boolean) {
    private val settings = Map(SluiceOptions.CreditBased.key -> creditBased.toString)
    val a = new TestingExecutor("A", settings, smallSockets)
    val b = new TestingExecutor("B", settings, smallSockets)
    val forB3 = a.pipelinedPartition(ResultPartitionID(1, 3), 1)
    val forB4 = a.pipelinedPartition(ResultPartitionID(1, 4), 1)
    val b3 = new TestingGateReader(b.gate("B.3", Vector(GateInput(forB3.partitionId, 0, 1, a.location))))
    val b4 = new TestingGateReader(b.gate("B.4", Vector(GateInput(forB4.partitionId, 0, 1, a.location))))
    // B.4 requests its partition but does not read it (a gate never read requests nothing at all).
    b4.gate.requestPartitions()

    def produce(p: io.sluice.partition.PipelinedResultPartition, n: Int) = async {
      TestingRecords.writeMany(p, 0, n, recordSize)
      p.finish()
      p.awaitConsumed(60000)
    }

    def finish(): Unit = {
      b3.close(); b4.close()
      assert(b.connectionManager.numClientConnections == 1 && a.connectionManager.numServerConnections == 1,
        "both consumers shared one connection")
      a.assertNoCreditViolations(); b.assertNoCreditViolations()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("credit-based: B.3 receives all its data while B.4 is stalled on the same connection") {
    val s = new Skew(creditBased = true)
    withExecutors(s.a, s.b) {
      val y = s.produce(s.forB4, b4Records)
      Thread.sleep(300) // B.4's data arrives and its credit runs out; nobody reads it
      val x = s.produce(s.forB3, b3Records)
      val reading3 = async(s.b3.readAll())
      assert(await(reading3, 20000) == Map((3L, 0) -> b3Records),
        "B.3 read everything while B.4 did not read at all")
      assert(s.b4.recordsRead.get == 0)
      assert(!y.isDone, "B.4's producer is backpressured")
      assert(s.b.counters.readStalls.sum == 0, "the connection never stopped reading")
      assert(s.b.counters.creditAnnounced.sum > 0)
      val reading4 = async(s.b4.readAll())
      assert(await(reading4, 30000) == Map((4L, 0) -> b4Records))
      await(x); await(y)
      s.finish()
    }
  }

  test("credit-less: B.3 makes no progress while B.4 is stalled, and completes once B.4 resumes") {
    val s = new Skew(creditBased = false)
    withExecutors(s.a, s.b) {
      val y = s.produce(s.forB4, b4Records)
      val deadline = System.currentTimeMillis() + 20000
      while (!s.b.connectionManager.clientFactory.isAnyStalled && System.currentTimeMillis() < deadline) Thread.sleep(5)
      assert(s.b.connectionManager.clientFactory.isAnyStalled, "B.4's full pool stopped reading the connection")
      val x = s.produce(s.forB3, b3Records)
      val reading3 = async(s.b3.readAll())
      intercept[TimeoutException](reading3.get(1500, java.util.concurrent.TimeUnit.MILLISECONDS))
      assert(s.b3.recordsRead.get == 0, "B.3 received nothing: its data is stuck behind B.4's on the connection")
      assert(s.b.counters.readStalls.sum >= 1)
      val reading4 = async(s.b4.readAll())
      assert(await(reading4, 30000) == Map((4L, 0) -> b4Records))
      assert(await(reading3, 30000) == Map((3L, 0) -> b3Records), "B.3 completed after B.4 resumed")
      await(x); await(y)
      s.finish()
    }
  }
}
