package io.sluice.memory

import java.util.concurrent.{ConcurrentLinkedQueue, CountDownLatch}
import java.util.concurrent.atomic.AtomicInteger

/**
 * A [[BufferListener]] that counts the offers it gets and keeps (or, with `accept = false`,
 * refuses) the buffers. The test owns what it kept and releases it.
 */
final class TestingBufferListener(accept: Boolean = true) extends BufferListener {
  val received = new AtomicInteger
  val destroyed = new AtomicInteger
  val buffers = new ConcurrentLinkedQueue[NetworkBuffer]()
  val firstOffer = new CountDownLatch(1)

  override def notifyBufferAvailable(buffer: NetworkBuffer): Boolean = {
    received.incrementAndGet()
    if (accept) buffers.add(buffer)
    firstOffer.countDown()
    accept
  }

  override def notifyBufferDestroyed(): Unit = {
    destroyed.incrementAndGet()
    firstOffer.countDown()
  }
}
