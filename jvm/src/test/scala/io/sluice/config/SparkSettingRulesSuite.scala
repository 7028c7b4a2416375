package io.sluice.config

import io.sluice.buffer.BlockCodec
import io.sluice.partition.PartitionedFileCipher
import org.scalatest.funsuite.AnyFunSuite

/** The refused Spark settings as data: conditions, placeholders, and agreement with the engine's own checks. */
class SparkSettingRulesSuite extends AnyFunSuite {

  private def lookup(settings: (String, String)*): String => Option[String] = settings.toMap.get

  test("a condition reads the key's value, or its default when unset, trimmed and matched as a whole") {
    val c = SparkSettingRule.Condition("k", "false", "(?i)true")
    assert(!c.holds(lookup()))
    assert(c.holds(lookup("k" -> " TRUE ")))
    assert(!c.holds(lookup("k" -> "truely")))
    assert(SparkSettingRule.Condition("k", "x", "(?i)true", negate = true).holds(lookup()))
  }

  test("placeholders are replaced by the values of the keys they name") {
    assert(SparkSettingRule.substitute("a=${a}, b=${b}.", Map("a" -> "1", "b" -> "two")) == "a=1, b=two.")
    assert(SparkSettingRules.Codec.message(lookup("spark.io.compression.codec" -> "brotli"))
        .startsWith("Sluice cannot compress buffers with spark.io.compression.codec=brotli: use lz4, lzf, snappy or zstd"))
  }

  test("Spark's defaults break no rule") {
    assert(SparkSettingRules.problems(lookup()) == Nil)
    assert(SparkSettingRules.problems(lookup("spark.master" -> "yarn")) == Nil)
  }

  test("every codec the rule accepts is one the engine compresses with, by short and class name") {
    val rule = SparkSettingRules.Codec
    for (name <- SparkSettingRules.Codecs) {
      assert(BlockCodec.forSparkCodec(name, 1).name == name)
      assert(!rule.holds(lookup("spark.io.compression.codec" -> name.toUpperCase)))
    }
    for (cls <- Seq("LZ4", "LZF", "Snappy", "ZStd").map(n => s"org.apache.spark.io.${n}CompressionCodec")) {
      BlockCodec.forSparkCodec(cls, 1)
      assert(!rule.holds(lookup("spark.io.compression.codec" -> cls)), cls)
    }
    assert(rule.holds(lookup("spark.io.compression.codec" -> "brotli")))
    assert(!rule.holds(lookup("spark.io.compression.codec" -> "brotli", "spark.shuffle.compress" -> "false")))
    val e = intercept[IllegalArgumentException](BlockCodec.forSparkCodec("brotli", 1))
    assert(e.getMessage == rule.message(lookup("spark.io.compression.codec" -> "brotli")))
  }

  test("the cipher rule and the engine's cipher check agree, with the same message") {
    val rule = SparkSettingRules.Cipher
    val on = "spark.io.encryption.enabled" -> "true"
    assert(!rule.holds(lookup(on)) && !rule.holds(lookup(on, "spark.io.crypto.cipher.transformation" -> "aes/ctr/nopadding")))
    val cbc = "spark.io.crypto.cipher.transformation" -> "AES/CBC/PKCS5Padding"
    assert(rule.holds(lookup(on, cbc)) && !rule.holds(lookup(cbc)))
    val e = intercept[IllegalArgumentException](PartitionedFileCipher(new Array[Byte](16), cbc._2))
    assert(e.getMessage == "requirement failed: " + rule.message(lookup(cbc)))
  }

  test("rule ids are unique, and every rule names the keys it reads in its problem or fix") {
    assert(SparkSettingRules.all.map(_.id).distinct.size == SparkSettingRules.all.size)
    for (r <- SparkSettingRules.all; c <- r.when if c.key != "spark.master")
      assert((r.problem + r.fix).contains(c.key), s"${r.id} does not name ${c.key}")
  }
}
