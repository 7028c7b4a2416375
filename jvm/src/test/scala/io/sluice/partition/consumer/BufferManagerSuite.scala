package io.sluice.partition.consumer

import io.sluice.NettyLeakDetection
import io.sluice.memory.NetworkBuffer
import io.sluice.memory.TestingBufferPools.withNetworkBufferPool
import org.scalatest.funsuite.AnyFunSuite

/**
 * A credit-based channel's buffers: exclusive ones as initial credit, floating ones from the
 * gate's pool to cover the sender's backlog, and nothing more, without an error, once the gate is
 * closing and its pool destroyed.
 */
class BufferManagerSuite extends AnyFunSuite with NettyLeakDetection {

  private val Producer = ProducerLocation("P", "producer", 1)

  test("floating buffers cover the backlog; a destroyed pool (the gate closing) gives none and throws nothing") {
    withNetworkBufferPool(16) { global =>
      val floating = global.createBufferPool(1, 4, "test gate floating buffers")
      val gate = new SingleInputGate("test gate", global, floating, None, 1000L, 1000L)
      val m = new BufferManager(gate, creditBased = true, 2, () => "test channel", () => ())
      assert(m.takeExclusive(gate.awaitExclusiveSegments(2)))
      val received = Seq.newBuilder[NetworkBuffer]
      received += m.requestBuffer(Producer)
      m.onBufferReceived(backlog = 3, unread = 0)
      assert(m.numFloatingBuffersAvailable == 4 && m.numAvailableBuffers == 5, "1 exclusive + 4 floating for 3 + 2")
      floating.lazyDestroy() // the gate is closing; its channel has not seen it yet
      received += m.requestBuffer(Producer)
      m.onBufferReceived(backlog = 10, unread = 0) // asks the destroyed pool: no buffer, no error, no listener
      assert(m.numFloatingBuffersAvailable == 3 && m.numAvailableBuffers == 4)
      received.result().foreach(_.release())
      m.release()
      gate.close()
      assert(global.numberOfAvailableSegments == 16, "every segment came back")
    }
  }
}
