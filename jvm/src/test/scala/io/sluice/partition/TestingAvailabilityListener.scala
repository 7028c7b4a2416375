package io.sluice.partition

import java.util.concurrent.{Semaphore, TimeUnit}
import java.util.concurrent.atomic.AtomicInteger

/** A listener that counts how often it was told about data and lets a reader wait for the next time. */
final class TestingAvailabilityListener extends BufferAvailabilityListener {
  val notifications = new AtomicInteger
  private val permits = new Semaphore(0)

  override def notifyDataAvailable(): Unit = {
    notifications.incrementAndGet()
    permits.release()
  }

  /** Waits for a notification not yet waited for; false after `timeoutMs`. */
  def awaitNotification(timeoutMs: Long = io.sluice.TestingThreads.Generous): Boolean =
    permits.tryAcquire(timeoutMs, TimeUnit.MILLISECONDS)
}
