package io.sluice.config

import java.util.Locale

/**
 * How a setting's text value is parsed, rendered and described. Values follow Spark's own
 * conventions (`32k`, `64m` for sizes, `100ms`, `2s` for durations) so a Sluice key reads like
 * any other Spark key. Immutable and thread-safe.
 */
sealed abstract class ConfigType[T] {

  /** Short type name used in the generated docs and in the Python option table. */
  def name: String

  /** Parses `raw`; a `Left` carries the reason, without the key (the caller adds it). */
  def parse(raw: String): Either[String, T]

  /** Renders a value the way a user would write it in spark-defaults.conf. */
  def render(value: T): String

  /** The value as a number for range checks (bytes, milliseconds); None for non-numeric types. */
  def toLong(value: T): Option[Long] = value match {
    case n: Int => Some(n.toLong)
    case n: Long => Some(n)
    case d: Double => Some(math.floor(d).toLong)
    case _ => None
  }
}

object ConfigType {

  object IntType extends ConfigType[Int] {
    val name = "int"
    def parse(raw: String): Either[String, Int] =
      raw.trim.toIntOption.toRight("not a whole number")
    def render(value: Int): String = value.toString
  }

  object DoubleType extends ConfigType[Double] {
    val name = "double"
    def parse(raw: String): Either[String, Double] =
      raw.trim.toDoubleOption.filterNot(_.isNaN).toRight("not a number")
    def render(value: Double): String = value.toString
  }

  object BooleanType extends ConfigType[Boolean] {
    val name = "boolean"
    def parse(raw: String): Either[String, Boolean] = raw.trim.toLowerCase(Locale.ROOT) match {
      case "true" => Right(true)
      case "false" => Right(false)
      case _ => Left("not true or false")
    }
    def render(value: Boolean): String = value.toString
  }

  object StringType extends ConfigType[String] {
    val name = "string"
    def parse(raw: String): Either[String, String] = Right(raw.trim)
    def render(value: String): String = value
  }

  /** A size in bytes: a plain number of bytes, or a number with b, k, m, g or t (powers of 1024). */
  object BytesType extends ConfigType[Long] {
    val name = "bytes"
    private val Pattern = """(?i)^\s*(\d+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib|t|tb|tib)?\s*$""".r
    def parse(raw: String): Either[String, Long] = raw match {
      case Pattern(num, unit) =>
        val shift = Option(unit).map(_.toLowerCase(Locale.ROOT).take(1)) match {
          case None | Some("b") => 0
          case Some("k") => 10
          case Some("m") => 20
          case Some("g") => 30
          case Some(_) => 40
        }
        num.toLongOption.filter(n => n <= (Long.MaxValue >> shift)).map(_ << shift)
          .toRight("too large")
      case _ => Left("not a size (e.g. 32k, 64m, 1g)")
    }
    def render(value: Long): String = {
      val units = Seq(40 -> "t", 30 -> "g", 20 -> "m", 10 -> "k")
      units.collectFirst { case (shift, u) if value != 0 && value % (1L << shift) == 0 => s"${value >> shift}$u" }
        .getOrElse(s"${value}b")
    }
  }

  /**
   * A duration in milliseconds: a plain number of milliseconds, or a number with us, ms, s, min,
   * h or d. Negative values are allowed where the key gives them a meaning (bufferTimeout=-1).
   */
  object DurationMsType extends ConfigType[Long] {
    val name = "duration"
    private val Pattern = """(?i)^\s*(-?\d+)\s*(us|ms|s|sec|m|min|h|d)?\s*$""".r
    def parse(raw: String): Either[String, Long] = raw match {
      case Pattern(num, unit) =>
        num.toLongOption.toRight("too large").flatMap { n =>
          val (factor, divisor) = Option(unit).map(_.toLowerCase(Locale.ROOT)) match {
            case None | Some("ms") => (1L, 1L)
            case Some("us") => (1L, 1000L)
            case Some("s") | Some("sec") => (1000L, 1L)
            case Some("m") | Some("min") => (60000L, 1L)
            case Some("h") => (3600000L, 1L)
            case Some(_) => (86400000L, 1L)
          }
          // Multiplying past Long.MaxValue would silently wrap around to an unrelated duration.
          try Right(Math.multiplyExact(n, factor) / divisor)
          catch { case _: ArithmeticException => Left("too large") }
        }
      case _ => Left("not a duration (e.g. 100ms, 5s, 2min)")
    }
    def render(value: Long): String =
      if (value != 0 && value % 60000 == 0) s"${value / 60000}min"
      else if (value != 0 && value % 1000 == 0) s"${value / 1000}s"
      else s"${value}ms"
  }

  /** One of a fixed set of lower-case words. */
  final case class EnumType(values: Seq[String]) extends ConfigType[String] {
    val name = "enum"
    def parse(raw: String): Either[String, String] = {
      val v = raw.trim.toLowerCase(Locale.ROOT)
      if (values.contains(v)) Right(v) else Left(s"not one of ${values.mkString(", ")}")
    }
    def render(value: String): String = value
  }
}
