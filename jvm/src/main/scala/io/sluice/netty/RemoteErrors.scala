package io.sluice.netty

/**
 * Turns what Spark's network-common reports of a failed RPC (the server's whole stack trace, as
 * text, in a RuntimeException) back into the server's message, for errors that name what was
 * wrong instead of a page of another process's frames. Stateless.
 */
object RemoteErrors {

  /** The server's message in `e`: the first line of its text, without the exception's class name. */
  def message(e: Throwable): String = {
    val text = Option(e.getMessage).getOrElse(e.toString)
    val first = text.linesIterator.find(_.trim.nonEmpty).getOrElse(text).trim
    val named = """^(?:[a-zA-Z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error): """.r
    named.findPrefixOf(first).fold(first)(p => first.substring(p.length))
  }
}
