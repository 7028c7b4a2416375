package io.sluice.netty

/** A task thread of its own (so that a test can interrupt it) running `body` once. */
final class TestingTaskThread(body: => Any) {
  @volatile private var error: Throwable = _
  @volatile private var interruptedAtEnd = false
  private val thread = new Thread(() => {
      try body
      catch { case e: Throwable => error = e }
      interruptedAtEnd = Thread.currentThread().isInterrupted
    }, "sluice-test-interrupted-task")
  thread.setDaemon(true)
  thread.start()

  def interrupt(): Unit = thread.interrupt()

  /** What `body` threw (fails when it returned or did not end within `timeoutMs`). */
  def failure(timeoutMs: Long): Throwable = {
    thread.join(timeoutMs)
    assert(!thread.isAlive, s"the task did not end within ${timeoutMs}ms")
    assert(error != null, "the task returned without failing")
    error
  }

  def wasInterruptedAtEnd: Boolean = interruptedAtEnd
}
