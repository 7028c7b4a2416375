package io.sluice.bench

/** The command line of a JVM benchmark's main: `--name value` pairs, in any order. */
object BenchOptions {

  /** `args` as a map from option name (without `--`) to value; names the first pair that is not one. */
  def parse(args: Array[String]): Map[String, String] =
    args.grouped(2).map {
      case Array(k, v) if k.startsWith("--") => k.stripPrefix("--") -> v
      case other => throw new IllegalArgumentException(s"expected --option value, got ${other.mkString(" ")}")
    }.toMap
}
