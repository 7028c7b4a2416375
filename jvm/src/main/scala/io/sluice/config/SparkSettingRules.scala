package io.sluice.config

import java.util.regex.Pattern

/**
 * One Spark setting (or combination) Sluice refuses at start-up, as data: the conditions on Spark
 * configuration keys that must all hold, the problem and its fix. `${key}` in either text stands
 * for that key's value. Kept as data, like [[AtLeast]]: the Spark boundary's `SparkFeatureCheck`
 * applies [[SparkSettingRules.all]] to an application's SparkConf when a Sluice shuffle manager
 * starts, and [[ConfigDocs]] exports them to `python/sluice/_spark_rules.json`, from which
 * `sluice doctor` applies the same rules, with the same words, before anything starts. Immutable.
 */
final case class SparkSettingRule(id: String, when: Seq[SparkSettingRule.Condition], problem: String, fix: String) {

  /** Whether every condition holds for the values `lookup` gives (None: the key is not set). */
  def holds(lookup: String => Option[String]): Boolean = when.forall(_.holds(lookup))

  /** The problem and its fix in one line, with the values of the keys they name. */
  def message(lookup: String => Option[String]): String =
    SparkSettingRule.substitute(s"$problem $fix", key => lookup(key).getOrElse(""))
}

object SparkSettingRule {

  /**
   * `key`'s value (`default` when it is not set), without surrounding spaces, matches `pattern`
   * as a whole (a Java regular expression that Python's `re.fullmatch` reads alike), or does not
   * when `negate`.
   */
  final case class Condition(key: String, default: String, pattern: String, negate: Boolean = false) {
    private val regex = Pattern.compile(pattern)

    def holds(lookup: String => Option[String]): Boolean =
      regex.matcher(lookup(key).getOrElse(default).trim).matches() != negate
  }

  private val Placeholder = Pattern.compile("""\$\{([^}]+)\}""")

  /** `text` with every `${key}` replaced by `value(key)`. */
  def substitute(text: String, value: String => String): String = {
    val m = Placeholder.matcher(text)
    val out = new StringBuilder
    var last = 0
    while (m.find()) {
      out ++= text.substring(last, m.start()) ++= value(m.group(1))
      last = m.end()
    }
    (out ++= text.substring(last)).toString
  }
}

/**
 * Every Spark setting Sluice refuses at start-up ([[all]]), those it only warns about as it starts
 * ([[warnings]]: they run, and hurt), and the Spark release line it runs on.
 */
object SparkSettingRules {
  import SparkSettingRule.Condition

  /** The Spark release line (major.minor) this build of Sluice is compiled and tested against. */
  val SparkLine: String = "4.3"

  private val True = "(?i)true"
  private val False = "(?i)false"

  /** Spark's I/O compression codecs Sluice compresses buffers with, by short name. */
  val Codecs: Seq[String] = Seq("lz4", "lzf", "snappy", "zstd")
  val CodecKey = "spark.io.compression.codec"

  /** The one I/O encryption transformation Spark supports, and so the only one Sluice accepts. */
  val CipherTransformation = "AES/CTR/NoPadding"
  val CipherTransformationKey = "spark.io.crypto.cipher.transformation"
  val IoEncryptionKey = "spark.io.encryption.enabled"

  val ShuffleService: SparkSettingRule = SparkSettingRule("shuffle-service",
    Seq(Condition("spark.shuffle.service.enabled", "false", True)),
    "spark.shuffle.service.enabled=true: the external shuffle service cannot serve Sluice's map outputs, which " +
      "live in the executors that wrote them, and Spark would keep a lost executor's outputs registered as if the " +
      "service still held them.",
    "Set spark.shuffle.service.enabled=false; for dynamic allocation use Sluice's node shuffle service " +
      "(spark.sluice.service.enabled=true) or spark.dynamicAllocation.shuffleTracking.enabled=true instead. On YARN, where spark-defaults.conf often " +
      "enables it for the NodeManagers' spark_shuffle auxiliary service, pass --conf " +
      "spark.shuffle.service.enabled=false --conf spark.dynamicAllocation.shuffleTracking.enabled=true with this " +
      "application (`sluice conf --yarn` prints them; the auxiliary service can keep serving other applications).")

  val PushBasedShuffle: SparkSettingRule = SparkSettingRule("push-based-shuffle",
    Seq(Condition("spark.shuffle.push.enabled", "false", True)),
    "spark.shuffle.push.enabled=true: push-based shuffle merges map outputs in external shuffle services, which " +
      "cannot read Sluice's.",
    "Set spark.shuffle.push.enabled=false.")

  /**
   * Spark ignores dynamic allocation on a local master (`local`, `local[...]`), and so does this
   * rule; with Sluice's node shuffle service, map outputs outlive their executors and Spark needs no
   * tracking.
   */
  val DynamicAllocationWithoutTracking: SparkSettingRule = SparkSettingRule("dynamic-allocation-without-tracking",
    Seq(Condition("spark.dynamicAllocation.enabled", "false", True),
      Condition("spark.dynamicAllocation.shuffleTracking.enabled", "true", False),
      Condition(ServiceOptions.ServiceEnabled.key, "false", True, negate = true),
      Condition("spark.master", "local[*]", """local(\[.*)?""", negate = true)),
    "spark.dynamicAllocation.enabled=true with spark.dynamicAllocation.shuffleTracking.enabled=false: without a " +
      "shuffle service, shuffle tracking is what keeps executors that hold live Sluice map outputs until " +
      "their shuffle is released.",
    "Set spark.dynamicAllocation.shuffleTracking.enabled=true (Spark's default), spark.dynamicAllocation.enabled=false, " +
      "or run Sluice's node shuffle service (spark.sluice.service.enabled=true), which keeps map outputs when " +
      "executors go.")

  /** Spark's key of the shuffle storage plugin, its default, and Sluice's. */
  val ShuffleDataIOKey = "spark.shuffle.sort.io.plugin.class"
  val DefaultShuffleDataIO = "org.apache.spark.shuffle.sort.io.LocalDiskShuffleDataIO"
  val SluiceShuffleDataIO = "org.apache.spark.shuffle.sluice.SluiceShuffleDataIO"

  /** [[SluiceShuffleDataIO]] as a pattern both Java and Python read (no \Q...\E quoting). */
  private val SluiceShuffleDataIOPattern = SluiceShuffleDataIO.replace(".", """\.""")

  val NodeServiceStoragePlugin: SparkSettingRule = SparkSettingRule("node-service-storage-plugin",
    Seq(Condition(ServiceOptions.ServiceEnabled.key, "false", True),
      Condition(ShuffleDataIOKey, DefaultShuffleDataIO, SluiceShuffleDataIOPattern, negate = true)),
    "spark.sluice.service.enabled=true with spark.shuffle.sort.io.plugin.class=${spark.shuffle.sort.io.plugin.class}: " +
      "Spark learns that the node shuffle service keeps map outputs from Sluice's storage plugin.",
    s"Set $ShuffleDataIOKey=$SluiceShuffleDataIO (sluice.configure and sluice conf do).")

  /**
   * Decommissioning executors with no peer to take their map outputs copy them to Spark's fallback
   * storage; Sluice's storage plugin deletes those copies when Spark drops their shuffle and when
   * the application ends, so it must be the one Spark loads.
   */
  val FallbackStorage: SparkSettingRule = SparkSettingRule("decommission-fallback-storage",
    Seq(Condition("spark.storage.decommission.enabled", "false", True),
      Condition("spark.storage.decommission.shuffleBlocks.enabled", "true", True),
      Condition("spark.storage.decommission.fallbackStorage.path", "", ".+"),
      Condition(ShuffleDataIOKey, DefaultShuffleDataIO, SluiceShuffleDataIOPattern, negate = true)),
    "spark.storage.decommission.fallbackStorage.path is set (with spark.storage.decommission.enabled and " +
      "spark.storage.decommission.shuffleBlocks.enabled on) but spark.shuffle.sort.io.plugin.class is not Sluice's " +
      "storage plugin: the map outputs decommissioning executors copy to the fallback storage are read and " +
      "deleted through it.",
    s"Set $ShuffleDataIOKey=$SluiceShuffleDataIO (sluice.configure and sluice conf do), or unset " +
      "spark.storage.decommission.fallbackStorage.path (Sluice then moves map outputs to peer executors only).")

  val Codec: SparkSettingRule = SparkSettingRule("compression-codec",
    Seq(Condition("spark.shuffle.compress", "true", True),
      Condition(CodecKey, "lz4",
        s"(?i)(${Codecs.mkString("|")}|org\\.apache\\.spark\\.io\\.(${Codecs.mkString("|")})compressioncodec)",
        negate = true)),
    "Sluice cannot compress buffers with spark.io.compression.codec=${spark.io.compression.codec}:",
    s"use ${Codecs.init.mkString(", ")} or ${Codecs.last}, or set spark.shuffle.compress=false.")

  val Cipher: SparkSettingRule = SparkSettingRule("io-encryption-cipher",
    Seq(Condition(IoEncryptionKey, "false", True),
      Condition(CipherTransformationKey, CipherTransformation, s"(?i)$CipherTransformation",
        negate = true)),
    "spark.io.crypto.cipher.transformation=${spark.io.crypto.cipher.transformation} is not supported: Sluice " +
      s"encrypts its blocking partition files with $CipherTransformation only, as Spark encrypts its own shuffle " +
      s"files ($IoEncryptionKey=true).",
    s"Remove $CipherTransformationKey, or set it to $CipherTransformation.")

  val all: Seq[SparkSettingRule] =
    Seq(ShuffleService, PushBasedShuffle, DynamicAllocationWithoutTracking, NodeServiceStoragePlugin, FallbackStorage,
      Codec, Cipher)

  /**
   * Spark's ExecutorMonitor tracks shuffles whenever spark.shuffle.service.enabled is false and
   * shuffle tracking is on (its default), whatever the storage plugin says, so beside the node
   * shuffle service it keeps the executors the service frees.
   */
  val NodeServiceWithTracking: SparkSettingRule = SparkSettingRule("node-service-with-shuffle-tracking",
    Seq(Condition("spark.dynamicAllocation.enabled", "false", True),
      Condition(ServiceOptions.ServiceEnabled.key, "false", True),
      Condition("spark.dynamicAllocation.shuffleTracking.enabled", "true", True),
      Condition("spark.shuffle.service.enabled", "false", True, negate = true),
      Condition("spark.master", "local[*]", """local(\[.*)?""", negate = true)),
    "spark.sluice.service.enabled=true with dynamic allocation and spark.dynamicAllocation.shuffleTracking.enabled " +
      "on (Spark's default): Spark still keeps every executor that holds map outputs until their shuffle is " +
      "dropped (it tracks shuffles whenever spark.shuffle.service.enabled is false, whatever the storage plugin " +
      "says), so idle executors are not released although the node shuffle service keeps their outputs.",
    "Set spark.dynamicAllocation.shuffleTracking.enabled=false (sluice conf --service-enabled true and " +
      "sluice.configure(..., service_enabled=True) do).")

  val warnings: Seq[SparkSettingRule] = Seq(NodeServiceWithTracking)

  /** The problems of `lookup`'s settings, one line each, in [[all]]'s order. */
  def problems(lookup: String => Option[String]): Seq[String] = messages(all, lookup)

  /** What Sluice warns about in `lookup`'s settings, one line each. */
  def warningsOf(lookup: String => Option[String]): Seq[String] = messages(warnings, lookup)

  private def messages(rules: Seq[SparkSettingRule], lookup: String => Option[String]): Seq[String] =
    rules.filter(_.holds(lookup)).map(_.message(lookup))
}
