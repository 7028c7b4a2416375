package io.sluice.netty

import java.io.IOException

/**
 * Tells a failure for want of a process's resources (memory, file descriptors) from a failure to
 * read the data: the server reports the first as a [[ErrorKind.ServerError]] and the gate fails
 * the task for it rather than blaming the producer. Java reports a process or system out of file
 * descriptors (EMFILE, ENFILE) only in the message of an IOException ("Too many open files"),
 * which is what is matched. Stateless; any thread.
 */
object ResourceExhaustion {

  /** Whether `t` or one of its causes is an OutOfMemoryError or a file-descriptor exhaustion. */
  def apply(t: Throwable): Boolean = {
    var c = t
    var depth = 0
    while (c != null && depth < MaxDepth) {
      c match {
        case _: OutOfMemoryError => return true
        case e: IOException if isDescriptorExhaustion(e) => return true
        case _ =>
      }
      c = c.getCause
      depth += 1
    }
    false
  }

  private def isDescriptorExhaustion(e: IOException): Boolean = {
    val m = e.getMessage
    m != null && m.contains(TooManyOpenFiles)
  }

  /** The text of EMFILE and ENFILE ("Too many open files in system") in Java's exceptions. */
  val TooManyOpenFiles = "Too many open files"

  private val MaxDepth = 16
}
