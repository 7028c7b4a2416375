package io.sluice.config

/**
 * Runs [[SluiceConf]]'s checks on `key=value` arguments and prints `OK` or the error's message, one
 * line per line of arguments read from standard input, so Python's tests can compare
 * `sluice.configure`'s checks with the JVM's (tests/test_config.py) in one JVM start.
 */
object TestingConfCheck {
  def main(args: Array[String]): Unit = {
    scala.io.Source.stdin.getLines().foreach { line =>
      val settings = line.split(' ').filter(_.nonEmpty).map { kv =>
        val i = kv.indexOf('=')
        kv.substring(0, i) -> kv.substring(i + 1)
      }
      val verdict =
        try { SluiceConf(settings.toSeq); "OK" }
        catch { case e: IllegalArgumentException => e.getMessage.replace('\n', ' ') }
      println(verdict)
    }
  }
}
