package io.sluice.buffer

import java.io.IOException
import java.nio.ByteBuffer
import java.util.Locale

import scala.util.control.NonFatal

import com.github.luben.zstd.Zstd
import io.sluice.config.SparkSettingRules
import com.ning.compress.lzf.util.{ChunkDecoderFactory, ChunkEncoderFactory}
import net.jpountz.lz4.LZ4Factory
import org.xerial.snappy.Snappy

/**
 * Compresses one network buffer at a time with the codec Spark is configured with
 * (`spark.io.compression.codec`), using each library's block API on direct memory, so a buffer is
 * compressed and decompressed without stream framing or extra copies (lzf, which only works on
 * heap arrays, is the exception). Instances are not thread-safe: one per writer or reader.
 *
 * All offsets are absolute positions in the given direct ByteBuffers; their positions and limits
 * are left alone.
 *
 * Compressed bytes come from peers and from files, so decompression trusts nothing in them: every
 * codec writes at most the `rawLength` bytes the buffer's header announced (which the caller checked
 * against its segment), never beyond, and data that is corrupt or decompresses to another length
 * fails with an IOException naming the codec.
 */
sealed abstract class BlockCodec(val name: String) {

  /** Bytes `compress` may write for `rawLength` input bytes. */
  def maxCompressedLength(rawLength: Int): Int

  /** Compresses src[srcOff, srcOff+len) into dst at dstOff; returns the compressed length. */
  def compress(src: ByteBuffer, srcOff: Int, len: Int, dst: ByteBuffer, dstOff: Int): Int

  /**
   * Decompresses exactly `rawLength` bytes into dst at dstOff, writing nothing beyond them, or
   * throws an IOException naming the codec.
   */
  final def decompress(src: ByteBuffer, srcOff: Int, len: Int, dst: ByteBuffer, dstOff: Int, rawLength: Int): Unit = {
    if (rawLength < 0 || dstOff < 0 || dstOff.toLong + rawLength > dst.capacity()) {
      throw corrupt(s"cannot decompress $rawLength bytes at offset $dstOff of a ${dst.capacity()}-byte buffer")
    }
    try decompressBlock(src, srcOff, len, dst, dstOff, rawLength)
    catch {
      case e: BlockCodec.CorruptBlockException => throw e
      case NonFatal(e) => throw new BlockCodec.CorruptBlockException(s"$name: corrupt compressed data ($e)", e)
    }
  }

  protected def corrupt(what: String): IOException = new BlockCodec.CorruptBlockException(s"$name: $what", null)

  protected def decompressBlock(src: ByteBuffer, srcOff: Int, len: Int, dst: ByteBuffer, dstOff: Int, rawLength: Int): Unit

  protected def checkLength(got: Long, rawLength: Int): Unit =
    if (got != rawLength) throw corrupt(s"decompressed $got bytes, expected $rawLength")
}

object BlockCodec {

  /** Compressed data that does not decompress to what its buffer announced. */
  final class CorruptBlockException(message: String, cause: Throwable) extends IOException(message, cause)

  /** The codec for a `spark.io.compression.codec` value (short name or Spark class name). */
  def forSparkCodec(value: String, zstdLevel: Int): BlockCodec = {
    val short = value.trim.toLowerCase(Locale.ROOT) match {
      case "org.apache.spark.io.lz4compressioncodec" => "lz4"
      case "org.apache.spark.io.lzfcompressioncodec" => "lzf"
      case "org.apache.spark.io.snappycompressioncodec" => "snappy"
      case "org.apache.spark.io.zstdcompressioncodec" => "zstd"
      case other => other
    }
    short match {
      case "lz4" => new Lz4
      case "zstd" => new ZstdCodec(zstdLevel)
      case "snappy" => new SnappyCodec
      case "lzf" => new Lzf
      case _ => throw new IllegalArgumentException(
          SparkSettingRules.Codec.message(Map(SparkSettingRules.CodecKey -> value).get))
    }
  }

  private final class Lz4 extends BlockCodec("lz4") {
    private val factory = LZ4Factory.fastestInstance()
    private val compressor = factory.fastCompressor()
    private val decompressor = factory.safeDecompressor()
    def maxCompressedLength(rawLength: Int): Int = compressor.maxCompressedLength(rawLength)
    def compress(src: ByteBuffer, srcOff: Int, len: Int, dst: ByteBuffer, dstOff: Int): Int =
      compressor.compress(src, srcOff, len, dst, dstOff, dst.capacity() - dstOff)
    def decompressBlock(src: ByteBuffer, srcOff: Int, len: Int, dst: ByteBuffer, dstOff: Int, rawLength: Int): Unit =
      checkLength(decompressor.decompress(src, srcOff, len, dst, dstOff, rawLength), rawLength)
  }

  private final class ZstdCodec(level: Int) extends BlockCodec("zstd") {
    def maxCompressedLength(rawLength: Int): Int = Zstd.compressBound(rawLength).toInt
    def compress(src: ByteBuffer, srcOff: Int, len: Int, dst: ByteBuffer, dstOff: Int): Int = {
      val n = Zstd.compressDirectByteBuffer(dst, dstOff, dst.capacity() - dstOff, src, srcOff, len, level)
      if (Zstd.isError(n)) throw new IOException(s"zstd: ${Zstd.getErrorName(n)}")
      n.toInt
    }
    def decompressBlock(src: ByteBuffer, srcOff: Int, len: Int, dst: ByteBuffer, dstOff: Int, rawLength: Int): Unit = {
      val n = Zstd.decompressDirectByteBuffer(dst, dstOff, rawLength, src, srcOff, len)
      if (Zstd.isError(n)) throw corrupt(Zstd.getErrorName(n))
      checkLength(n, rawLength)
    }
  }

  /**
   * Snappy's native uncompress writes as many bytes as the data's own header declares, whatever
   * room the destination has; the declared length is checked against `rawLength` first.
   */
  private final class SnappyCodec extends BlockCodec("snappy") {
    def maxCompressedLength(rawLength: Int): Int = Snappy.maxCompressedLength(rawLength)
    def compress(src: ByteBuffer, srcOff: Int, len: Int, dst: ByteBuffer, dstOff: Int): Int =
      Snappy.compress(window(src, srcOff, len), window(dst, dstOff, dst.capacity() - dstOff))
    def decompressBlock(src: ByteBuffer, srcOff: Int, len: Int, dst: ByteBuffer, dstOff: Int, rawLength: Int): Unit = {
      val in = window(src, srcOff, len)
      val declared = Snappy.uncompressedLength(in)
      if (declared != rawLength) throw corrupt(s"the data declares $declared bytes, expected $rawLength")
      checkLength(Snappy.uncompress(in, window(dst, dstOff, rawLength)), rawLength)
    }
    private def window(b: ByteBuffer, off: Int, len: Int): ByteBuffer = {
      val d = b.duplicate(); d.limit(off + len).position(off); d
    }
  }

  /**
   * LZF works on heap arrays only: data is staged through two reused arrays. An LZF chunk holds
   * at most 64 KiB - 1 bytes (its header stores the length in 16 bits), so larger buffers are
   * written as several chunks; the decoder reads a sequence of chunks. It is compress-lzf's safe
   * decoder (plain array accesses, so hostile data ends in an exception, never in reading or
   * writing outside the arrays), not its Unsafe one.
   */
  private final class Lzf extends BlockCodec("lzf") {
    private val encoder = ChunkEncoderFactory.optimalInstance()
    private val decoder = ChunkDecoderFactory.safeInstance()
    private var in = new Array[Byte](0)
    private var out = new Array[Byte](0)
    private val MaxChunk = com.ning.compress.lzf.LZFChunk.MAX_CHUNK_LEN
    def maxCompressedLength(rawLength: Int): Int =
      rawLength + rawLength / 32 + 64 + (rawLength / MaxChunk + 1) * com.ning.compress.lzf.LZFChunk.MAX_HEADER_LEN
    def compress(src: ByteBuffer, srcOff: Int, len: Int, dst: ByteBuffer, dstOff: Int): Int = {
      if (in.length < len) in = new Array[Byte](len)
      if (out.length < maxCompressedLength(len)) out = new Array[Byte](maxCompressedLength(len))
      src.get(srcOff, in, 0, len)
      var done = 0
      var end = 0
      while (done < len) {
        val chunk = math.min(MaxChunk, len - done)
        end = encoder.appendEncodedChunk(in, done, chunk, out, end)
        done += chunk
      }
      dst.put(dstOff, out, 0, end)
      end
    }
    def decompressBlock(src: ByteBuffer, srcOff: Int, len: Int, dst: ByteBuffer, dstOff: Int, rawLength: Int): Unit = {
      if (in.length < len) in = new Array[Byte](len)
      if (out.length < rawLength) out = new Array[Byte](rawLength)
      src.get(srcOff, in, 0, len)
      checkLength(decoder.decode(in, 0, len, out).toLong, rawLength)
      dst.put(dstOff, out, 0, rawLength)
    }
  }
}
