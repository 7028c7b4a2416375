package io.sluice.partition.consumer

import io.netty.buffer.ByteBufUtil
import io.sluice.{NettyLeakDetection, TestingShuffleEnvironment, TestingThread}
import io.sluice.memory.{NetworkBuffer, TestingBufferPools}
import io.sluice.partition.ResultPartitionID
import io.sluice.netty.TestingRecords
import org.scalatest.funsuite.AnyFunSuite

/** A gate's scratch segments go back to the executor only once nothing reads them any more. */
class GateScratchBuffersSuite extends AnyFunSuite with NettyLeakDetection {

  test("a gate closed by another thread while its task holds a scratch slice gives the segment back after the slice") {
    TestingShuffleEnvironment.withEnvironment() { env =>
      val id = ResultPartitionID(1, 0)
      val p = env.createBlockingPartition(id, 1)
      TestingRecords.writeMany(p, 0, 200, 300)
      p.finish()
      env.registerPartition(p)
      val gate = TestingShuffleEnvironment.gate(env, 0, id) // a local channel reads the file into a scratch buffer
      val next = gate.getNext()
      val held = ByteBufUtil.getBytes(next.buffer)
      assert(held.length > 0)
      new TestingThread("completion listener")(gate.close()).join() // a killed task's gate, closed under it
      // Whatever the executor can hand out now is taken and overwritten, as another task would.
      val pool = env.networkBufferPool
      val free = pool.numberOfAvailableSegments
      val other = pool.createBufferPool(free, free, "another task")
      val taken = (0 until free).map(_ => other.requestBuffer())
      assert(taken.forall(_ != null))
      taken.foreach((b: NetworkBuffer) => b.writeBytes(Array.fill[Byte](b.writableBytes())(0x5a.toByte)))
      assert(ByteBufUtil.getBytes(next.buffer).sameElements(held), "the slice the task holds is intact")
      next.buffer.release() // the last reference: now the segment goes back
      taken.foreach(_.release())
      other.lazyDestroy()
      env.releaseShuffle(1)
      TestingBufferPools.assertFull(pool)
    }
  }
}
