package io.sluice.partition

import java.security.{GeneralSecurityException, SecureRandom}
import java.util.Locale
import javax.crypto.Cipher
import javax.crypto.spec.SecretKeySpec

import io.sluice.config.SparkSettingRules

/**
 * The key and cipher blocking partition files are encrypted with when Spark's I/O encryption is
 * on (`spark.io.encryption.enabled`): the application's I/O encryption key, which Spark gives
 * every executor of the application, and AES/CTR/NoPadding, the one transformation Spark's own
 * shuffle and spill files use. Flink has no counterpart; Spark's CryptoStreamUtils encrypts its
 * files with the same key and mode.
 *
 * Each stored buffer is encrypted on its own, with the counter starting at an IV of its own (see
 * [[BufferIv]]), so any buffer can be decrypted without the rest of the file and the stored bytes
 * can travel to a remote reader as they lie in the file; the reader decrypts. CTR
 * keeps the length, so encryption costs no space. Confidentiality only, as in Spark: CTR
 * authenticates nothing. The CRC32C the producer keeps of each buffer (taken before encryption,
 * verified after decryption) catches a corrupted byte and a wrong key or IV, not a forger.
 *
 * Immutable and thread-safe, one per executor; each writer and each reading gate takes a
 * [[BufferCipher]] of its own ([[newBufferCipher]]).
 */
final class PartitionedFileCipher private (private[partition] val key: SecretKeySpec) {

  /** A cipher for one thread (a partition's writer, a gate's reader), reused for every buffer it handles. */
  def newBufferCipher(): BufferCipher = new BufferCipher(this, Cipher.getInstance(PartitionedFileCipher.Transformation))

  /** A random IV for a new partition file: its buffers count their counters from it. */
  def newFileIv(): BufferIv = {
    val r = PartitionedFileCipher.random.get()
    BufferIv(r.nextLong(), r.nextLong())
  }

  /** Bits of the key (128, 192 or 256). */
  def keySizeBits: Int = key.getEncoded.length * 8

  override def toString: String = s"PartitionedFileCipher(${PartitionedFileCipher.Transformation}, $keySizeBits-bit key)"
}

object PartitionedFileCipher {

  /** The transformation Spark's I/O encryption supports, and so the only one Sluice accepts. */
  val Transformation: String = SparkSettingRules.CipherTransformation

  /** Spark's settings, named in errors. */
  val EnabledKey: String = SparkSettingRules.IoEncryptionKey
  val TransformationKey: String = SparkSettingRules.CipherTransformationKey
  val KeySizeKey = "spark.io.encryption.keySizeBits"

  private val random = ThreadLocal.withInitial[SecureRandom](() => new SecureRandom)

  /**
   * The cipher for `key` with Spark's `transformation` setting. Fails with an
   * IllegalArgumentException naming the Spark setting when the transformation is not
   * AES/CTR/NoPadding or the key is not an AES key, and with the JVM's error when this JVM cannot
   * run AES/CTR: the application stops at start-up rather than write files it cannot read.
   */
  def apply(key: Array[Byte], transformation: String): PartitionedFileCipher = {
    checkTransformation(transformation)
    require(key != null && (key.length == 16 || key.length == 24 || key.length == 32),
      s"Spark's I/O encryption key has ${if (key == null) "no" else (key.length * 8).toString} bits; AES needs 128, 192 " +
        s"or 256 ($KeySizeKey)")
    val c = new PartitionedFileCipher(new SecretKeySpec(key.clone(), "AES"))
    try c.newBufferCipher().selfCheck()
    catch {
      case e: GeneralSecurityException =>
        throw new IllegalStateException(s"This JVM cannot encrypt with $Transformation and a ${c.keySizeBits}-bit key " +
            s"($EnabledKey=true, $KeySizeKey): $e", e)
    }
    c
  }

  /**
   * Refuses a `spark.io.crypto.cipher.transformation` Sluice cannot honour (anything but
   * AES/CTR/NoPadding, which is also all Spark's own I/O encryption supports). Needs no key: the
   * shuffle manager calls it at start-up, before executors have keys.
   */
  def checkTransformation(transformation: String): Unit =
    require(transformation != null && transformation.trim.toUpperCase(Locale.ROOT) == Transformation.toUpperCase(Locale.ROOT),
      SparkSettingRules.Cipher.message(Map(TransformationKey -> String.valueOf(transformation)).get))
}
