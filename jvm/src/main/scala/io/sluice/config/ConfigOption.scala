package io.sluice.config

/**
 * The one definition of a `spark.sluice.*` setting: key, type, default, what it means, the Flink
 * option it corresponds to, when it takes effect and which values are valid. Everything else (the
 * JVM's [[SluiceConf]], Python's `sluice.configure`, `docs/configuration.md`, the spark-submit
 * template) is derived from these definitions. Immutable.
 *
 * @param pythonName the snake_case keyword `sluice.configure(builder, ...)` accepts for this key
 * @param bounds     the valid values beyond the type (checked here and, from the generated option
 *                   table, by Python's `sluice.configure`)
 */
final case class ConfigOption[T](
    key: String,
    pythonName: String,
    tpe: ConfigType[T],
    default: T,
    doc: String,
    flinkOption: String,
    takesEffect: String,
    bounds: Bounds) {

  require(key.startsWith(ConfigOption.Prefix), s"$key is not under ${ConfigOption.Prefix}")

  def defaultString: String = tpe.render(default)

  /** Parses and validates `raw`, or fails with an error naming the key and the value. */
  def parse(raw: String): T = {
    val parsed = tpe.parse(raw).flatMap(v => bounds.violation(tpe.toLong(v)).toLeft(v))
    parsed.fold(why =>
        throw new IllegalArgumentException(
          s"Invalid value '$raw' for $key: $why" + (if (checkDoc.nonEmpty) s" (expected $checkDoc)" else "")),
      identity)
  }

  /** The valid range in words, with sizes and durations written the way users write them. */
  def checkDoc: String = bounds.describe {
    case v if tpe == ConfigType.BytesType => ConfigType.BytesType.render(v)
    case v if tpe == ConfigType.DurationMsType => ConfigType.DurationMsType.render(v)
    case v => v.toString
  }
}

/**
 * Valid numeric values of a setting (sizes in bytes, durations in milliseconds): an inclusive
 * range, optionally powers of two only. Kept as data so Python can apply the same rules.
 */
final case class Bounds(min: Option[Long] = None, max: Option[Long] = None, powerOfTwo: Boolean = false) {

  def violation(value: Option[Long]): Option[String] = value.flatMap { v =>
    if (powerOfTwo && java.lang.Long.bitCount(v) != 1) Some("not a power of two")
    else if (min.exists(v < _) || max.exists(v > _)) Some("out of range")
    else None
  }

  def describe(show: Long => String): String = {
    val range = (min, max) match {
      case (Some(lo), Some(hi)) => s"between ${show(lo)} and ${show(hi)}"
      case (Some(lo), None) => s"at least ${show(lo)}"
      case (None, Some(hi)) => s"at most ${show(hi)}"
      case _ => ""
    }
    Seq(if (powerOfTwo) "a power of two" else "", range).filter(_.nonEmpty).mkString(" ")
  }
}

object Bounds {
  val none: Bounds = Bounds()
}

object ConfigOption {
  val Prefix = "spark.sluice."

  /** When a setting is read. */
  object Effect {
    val ExecutorStart = "executor start (static)"
    val TaskStart = "each task"
    val OnRequest = "each request (driver)"
    val ServiceStart = "node shuffle service start"
  }

  def atLeast(min: Long): Bounds = Bounds(min = Some(min))
  def between(min: Long, max: Long): Bounds = Bounds(Some(min), Some(max))

  /**
   * One definition, its doc written as a margin-stripped block (what [[SluiceOptions]] and
   * [[ServiceOptions]] define with; here, so that neither object's initialisation needs the other's).
   */
  private[config] def define[T](key: String, py: String, tpe: ConfigType[T], default: T, flink: String,
      effect: String, bounds: Bounds = Bounds.none)(doc: String): ConfigOption[T] =
    ConfigOption(key, py, tpe, default, doc.stripMargin.replace('\n', ' ').trim, flink, effect, bounds)
}
