package io.sluice.config

/**
 * A rule between two size settings that neither's own [[Bounds]] can state: `subject` must be at
 * least `factor` × `reference` + `plus` bytes. A `subject` the user did not set rises to the bound
 * instead (its default is only a floor); one the user set below it is refused. Kept as data, like
 * [[Bounds]]: [[SluiceConf]] applies it, and [[ConfigDocs]] exports it into Python's option table,
 * from which `sluice.configure` applies the same rule with the same message before anything
 * starts. A `reference` is never itself the subject of a rule. Immutable.
 *
 * @param why what the rule protects, the end of the error message
 */
final case class AtLeast(
    subject: ConfigOption[Long],
    reference: ConfigOption[Long],
    factor: Long,
    plus: Long,
    why: String) {

  /** The least valid value of `subject` when `reference` is `referenceValue`. */
  def bound(referenceValue: Long): Long = factor * referenceValue + plus

  /** The rule in words: `2 × spark.sluice.memory.segmentSize`, `spark.sluice.memory.segmentSize + 1k`. */
  def formula: String =
    (if (factor == 1) "" else s"$factor × ") + reference.key +
      (if (plus == 0) "" else s" + ${ConfigType.BytesType.render(plus)}")

  /** The error for `conf`, or None when it holds. */
  def violation(conf: SluiceConf): Option[String] = {
    val least = bound(conf.get(reference))
    if (conf.get(subject) >= least) None
    else {
      val raw = conf.raw.getOrElse(subject.key, subject.defaultString)
      Some(s"Invalid value '$raw' for ${subject.key}: must be at least $formula " +
        s"(${ConfigType.BytesType.render(least)}): $why")
    }
  }
}

object AtLeast {

  /** Every rule between settings, checked by [[SluiceConf]] and exported to Python. */
  val all: Seq[AtLeast] = Seq(
    AtLeast(SluiceOptions.NetworkMemory, SluiceOptions.SegmentSize, 3, 0,
      "the network buffer pool needs at least two segments and the server one to read into"),
    AtLeast(SluiceOptions.MaxFrameLength, SluiceOptions.SegmentSize, 1, SluiceConf.MaxFrameOverhead,
      "a frame carries one segment's buffer under the largest frame and packed-entry headers"))
}
