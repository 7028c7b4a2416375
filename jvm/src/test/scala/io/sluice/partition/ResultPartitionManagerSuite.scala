package io.sluice.partition

import java.util.concurrent.CyclicBarrier
import java.util.concurrent.atomic.AtomicInteger

import io.sluice.NettyLeakDetection
import io.sluice.TestingThreads._
import io.sluice.memory.TestingBufferPools._
import io.sluice.partition.TestingResultPartitions._
import org.scalatest.funsuite.AnyFunSuite

class ResultPartitionManagerSuite extends AnyFunSuite with NettyLeakDetection {

  /** A pending reader that records which partitions it was served with. */
  private final class CountingRequest extends PendingViewRequest {
    val served = new AtomicInteger
    @volatile var partition: ResultPartition = _
    override def serve(p: ResultPartition): Unit = { partition = p; served.incrementAndGet() }
  }

  test("partitions are registered once, looked up by id, and unknown ids raise PartitionNotFoundException") {
    withNetworkBufferPool(16) { global =>
      val m = new ResultPartitionManager
      val p = pipelined(global, 1, poolMax = 2, shuffleId = 3, producerId = 7, onReleased = m.unregister)
      m.registerResultPartition(p)
      assert(m.getPartition(ResultPartitionID(3, 7)).contains(p))
      assert(m.numPartitions == 1 && m.partitionIds == Set(ResultPartitionID(3, 7)))
      val dup = pipelined(global, 1, poolMax = 2, shuffleId = 3, producerId = 7)
      intercept[IllegalStateException](m.registerResultPartition(dup))
      assert(m.registerIfAbsent(dup).exists(_ eq p), "putIfAbsent-style: the partition registered before, dup left out")
      assert(m.getPartition(ResultPartitionID(3, 7)).exists(_ eq p))
      dup.release(null)
      val e = intercept[PartitionNotFoundException](
        m.createSubpartitionView(ResultPartitionID(3, 8), 0, 1, NoOpBufferAvailabilityListener))
      assert(e.getMessage.contains("shuffle 3 producer 8"))
      assert(e.partitionId == ResultPartitionID(3, 8))
      val view = m.createSubpartitionView(ResultPartitionID(3, 7), 0, 1, NoOpBufferAvailabilityListener)
      p.finish()
      assert(drain(view, new TestingElementReader))
      assert(m.numPartitions == 0, "a consumed pipelined partition unregisters itself")
      assert(m.getPartition(ResultPartitionID(3, 7)).isEmpty)
    }
  }

  test("a view request for a partition not yet registered is served when its producer registers") {
    withNetworkBufferPool(16) { global =>
      val m = new ResultPartitionManager
      val early = new CountingRequest
      val id = ResultPartitionID(1, 1)
      assert(!m.createSubpartitionViewOrWait(id, early))
      assert(early.served.get == 0)
      val cancelled = new CountingRequest
      assert(!m.createSubpartitionViewOrWait(id, cancelled))
      m.cancelPending(id, cancelled)
      val p = pipelined(global, 1, poolMax = 2, shuffleId = 1, producerId = 1)
      m.registerResultPartition(p)
      assert(early.served.get == 1 && (early.partition eq p))
      assert(cancelled.served.get == 0, "a cancelled request is not served")
      val late = new CountingRequest
      assert(m.createSubpartitionViewOrWait(id, late))
      assert(late.served.get == 1)
      m.shutdown()
      assert(p.isReleased && m.numPartitions == 0)
      val afterShutdown = pipelined(global, 1, poolMax = 2, producerId = 9)
      intercept[IllegalStateException](m.registerResultPartition(afterShutdown))
      afterShutdown.release(null)
    }
  }

  test("racing a registration against a view request serves the request exactly once") {
    val rounds = 400
    withNetworkBufferPool(rounds) { global =>
      val m = new ResultPartitionManager
      val barrier = new CyclicBarrier(2)
      val partitions = (0 until rounds).map(i => pipelined(global, 1, poolMax = 1, shuffleId = 5, producerId = i))
      val requests = IndexedSeq.fill(rounds)(new CountingRequest)
      val producer = fork("registering producer") {
        partitions.foreach { p => barrier.await(); m.registerResultPartition(p) }
      }
      val consumer = fork("requesting consumer") {
        requests.zipWithIndex.foreach { case (r, i) =>
          barrier.await(); m.createSubpartitionViewOrWait(ResultPartitionID(5, i), r)
        }
      }
      producer.join(); consumer.join()
      requests.zipWithIndex.foreach { case (r, i) =>
        assert(r.served.get == 1, s"request $i was served ${r.served.get} times")
        assert(r.partition eq partitions(i))
      }
      assert(m.releasePartitionsOfShuffle(5) == rounds)
    }
  }

  test("releasePartitionsOfShuffle releases that shuffle's partitions and drops its pending requests") {
    withNetworkBufferPool(16) { global =>
      val m = new ResultPartitionManager
      val ofOne = (0 until 3).map(i => pipelined(global, 1, poolMax = 1, shuffleId = 1, producerId = i))
      val ofTwo = pipelined(global, 1, poolMax = 1, shuffleId = 2, producerId = 0)
      (ofOne :+ ofTwo).foreach(m.registerResultPartition)
      val pending = new CountingRequest
      m.createSubpartitionViewOrWait(ResultPartitionID(1, 9), pending)
      assert(m.releasePartitionsOfShuffle(1) == 3)
      assert(ofOne.forall(_.isReleased) && !ofTwo.isReleased)
      assert(m.partitionIds == Set(ResultPartitionID(2, 0)))
      val late = pipelined(global, 1, poolMax = 1, shuffleId = 1, producerId = 9)
      m.registerResultPartition(late)
      assert(pending.served.get == 0, "a dropped request is not served by a later registration")
      assert(m.releasePartitionsOfShuffle(7) == 0)
      m.releasePartition(ResultPartitionID(2, 0), new RuntimeException("lost"))
      assert(ofTwo.isReleased && ofTwo.failureCause.getMessage == "lost")
      m.shutdown()
      assert(late.isReleased)
    }
  }
}
