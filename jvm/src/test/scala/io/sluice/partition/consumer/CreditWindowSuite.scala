package io.sluice.partition.consumer

import io.sluice.NettyLeakDetection
import io.sluice.memory.NetworkBuffer
import io.sluice.memory.TestingBufferPools.withNetworkBufferPool
import org.scalatest.funsuite.AnyFunSuite

/**
 * A remote channel's credit window: it starts at Flink's (exclusive + floating per gate), grows
 * only while the channel runs dry with data waiting at its sender (a backlog, the task out of
 * data), shrinks while the task is what limits it, stays within its bounds, and the
 * channel then asks its gate's pool for what the window and the backlog allow.
 */
class CreditWindowSuite extends AnyFunSuite with NettyLeakDetection {

  private val Producer = ProducerLocation("P", "producer", 1)

  test("grows by half while the channel runs dry with data at its sender, up to its maximum") {
    val w = new CreditWindow(10, 40)
    w.onBufferReceived(backlog = 50, unread = 0, received = 100)
    assert(w.current == 15 && w.timesGrown == 1)
    Seq.fill(10)(w.onBufferReceived(backlog = 50, unread = 0, received = 100))
    assert(w.current == 40, "capped at the maximum")
    assert(w.timesGrown == 4, "10 -> 15 -> 22 -> 33 -> 40, then no more growth counted")
  }

  test("does not grow when the sender has no backlog, the task has unread data, or in the channel's first window") {
    val w = new CreditWindow(10, 40)
    w.onBufferReceived(backlog = 0, unread = 0, received = 100) // nothing more to send
    w.onBufferReceived(backlog = 50, unread = 1, received = 100) // the task is behind
    w.onBufferReceived(backlog = 50, unread = 0, received = 10) // the channel's first window: the task always waited
    assert(w.current == 10 && w.timesGrown == 0)
  }

  test("shrinks by one per arrival while half the window waits unread, never below its start") {
    val w = new CreditWindow(4, 40)
    Seq.fill(3)(w.onBufferReceived(100, 0, 100))
    assert(w.current == 13) // 4 -> 6 -> 9 -> 13
    w.onBufferReceived(backlog = 100, unread = 5, received = 100) // 5 < 13 / 2: no change
    assert(w.current == 13)
    w.onBufferReceived(backlog = 100, unread = 6, received = 100)
    assert(w.current == 12)
    Seq.fill(20)(w.onBufferReceived(backlog = 100, unread = 30, received = 100))
    assert(w.current == 4)
  }

  test("the free buffers required: the backlog plus the exclusive ones, as far as the window has room beside the unread") {
    val w = new CreditWindow(10, 40)
    assert(w.required(backlog = 0, exclusive = 2, unread = 0) == 2)
    assert(w.required(backlog = 3, exclusive = 2, unread = 0) == 5)
    assert(w.required(backlog = 500, exclusive = 2, unread = 0) == 10)
    assert(w.required(backlog = 500, exclusive = 2, unread = 3) == 7)
    assert(w.required(backlog = 500, exclusive = 2, unread = 9) == 1)
    assert(w.required(backlog = 500, exclusive = 2, unread = 30) == 0, "a task that stopped reading: nothing more")
  }

  test("a fixed window when the maximum is the start") {
    val w = new CreditWindow(10, 10)
    Seq.fill(5)(w.onBufferReceived(100, 0, 100))
    assert(w.current == 10 && w.timesGrown == 0)
  }

  test("a channel that runs dry takes more floating buffers than Flink's window; a task-bound one gives them back") {
    withNetworkBufferPool(64) { global =>
      val floating = global.createBufferPool(1, 30, "test gate floating buffers")
      val gate = new SingleInputGate("test gate", global, floating, None, 1000L, 1000L, initialFloatingCredit = 4)
      val m = new BufferManager(gate, creditBased = true, 2, () => "test channel", () => ())
      assert(m.takeExclusive(gate.awaitExclusiveSegments(2)))
      assert(m.creditWindow == 6, "2 exclusive + 4 floating to start")
      val held = scala.collection.mutable.ArrayBuffer.empty[NetworkBuffer]
      // The first window's worth arrives (the task reads nothing yet): Flink's window, no growth.
      held += m.requestBuffer(Producer)
      m.onBufferReceived(backlog = 100, unread = 0)
      (1 until 6).foreach { i =>
        held += m.requestBuffer(Producer)
        m.onBufferReceived(backlog = 100, unread = i)
      }
      assert(m.creditWindow == 6 && m.numCreditWindowGrowths == 0 && m.numAvailableBuffers == 0)
      held.foreach(_.release()) // the task reads them all; the exclusive ones become credit again
      held.clear()
      m.getAndResetUnannouncedCredit()
      // The next finds the task done with everything before it: the channel ran dry.
      held += m.requestBuffer(Producer)
      m.onBufferReceived(backlog = 100, unread = 0)
      assert(m.creditWindow == 9 && m.numCreditWindowGrowths == 1, "6 -> 9")
      assert(m.numAvailableBuffers == m.creditWindow - 1,
        s"holds its whole window but the buffer just received as credit for the backlog: ${m.numAvailableBuffers}")
      // More buffers with the task waiting each time: the window reaches the pool's size.
      while (m.creditWindow < 32) {
        val announced = m.getAndResetUnannouncedCredit()
        assert(announced > 0 || m.numAvailableBuffers > 0)
        while (m.numAvailableBuffers > 0) {
          held += m.requestBuffer(Producer)
          m.onBufferReceived(backlog = 100, unread = 0)
        }
      }
      assert(m.creditWindow == 32, "2 exclusive + the pool's 30")
      // Now the task falls behind: unread buffers pile up and the window shrinks.
      held.foreach(_.release())
      held.clear()
      m.getAndResetUnannouncedCredit()
      (0 until 40).foreach { i =>
        val b = m.requestBuffer(Producer)
        m.onBufferReceived(backlog = 100, unread = 20 + i)
        b.release()
      }
      assert(m.creditWindow < 32)
      m.release()
      gate.close()
      assert(global.numberOfAvailableSegments == 64, "every segment came back")
    }
  }
}
