package io.sluice

import java.util.concurrent.{CountDownLatch, TimeUnit}
import java.util.concurrent.atomic.AtomicReference

/**
 * A thread a test starts to play a producer, a reader or a blocked requester. [[join]] hands back
 * what the body returned or rethrows what it threw, so assertions made on the thread are not lost.
 */
final class TestingThread[T](val name: String)(body: => T) {
  private val outcome = new AtomicReference[Either[Throwable, T]]()
  private val done = new CountDownLatch(1)

  val thread: Thread = new Thread(() => {
      try outcome.set(Right(body))
      catch { case t: Throwable => outcome.set(Left(t)) }
      finally done.countDown()
    }, name)
  thread.setDaemon(true)
  thread.start()

  def isDone: Boolean = done.getCount == 0

  /** The body's result; fails the test when it threw or did not end in time. */
  def join(timeoutMs: Long = TestingThreads.Generous): T = {
    awaitDone(timeoutMs)
    outcome.get.fold(t => throw new AssertionError(s"$name failed: $t", t), identity)
  }

  /** What the body threw; fails the test when it returned normally or did not end in time. */
  def failure(timeoutMs: Long = TestingThreads.Generous): Throwable = {
    awaitDone(timeoutMs)
    outcome.get.fold(identity, r => throw new AssertionError(s"$name was expected to fail but returned $r"))
  }

  private def awaitDone(timeoutMs: Long): Unit = if (!done.await(timeoutMs, TimeUnit.MILLISECONDS)) {
    throw new AssertionError(s"$name did not end within ${timeoutMs}ms; it is at\n  " +
      thread.getStackTrace.mkString("\n  "))
  }

  /** Waits until the thread is parked in a wait (a blocking request, a monitor wait). */
  def awaitWaiting(timeoutMs: Long = TestingThreads.Generous): Unit =
    TestingThreads.eventually(timeoutMs, s"$name waiting (it is ${thread.getState})") {
      val s = thread.getState
      s == Thread.State.WAITING || s == Thread.State.TIMED_WAITING
    }
}

object TestingThreads {

  /** A timeout that only matters when something is broken (a loaded 2-core machine is slow). */
  val Generous: Long = 60000L

  /** Polls `condition` until it holds; fails naming `what` after `timeoutMs`. Never asserts on time. */
  def eventually(timeoutMs: Long = Generous, what: => String = "the condition")(condition: => Boolean): Unit = {
    val deadline = System.nanoTime() + timeoutMs * 1000000L
    while (!condition) {
      if (System.nanoTime() > deadline) throw new AssertionError(s"Timed out after ${timeoutMs}ms waiting for $what")
      Thread.sleep(1)
    }
  }

  def fork[T](name: String)(body: => T): TestingThread[T] = new TestingThread(name)(body)
}
