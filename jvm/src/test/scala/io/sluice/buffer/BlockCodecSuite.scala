package io.sluice.buffer

import java.nio.ByteBuffer

import io.sluice.NettyLeakDetection
import org.scalatest.funsuite.AnyFunSuite

class BlockCodecSuite extends AnyFunSuite with NettyLeakDetection {

  private val codecs = Seq("lz4", "lzf", "snappy", "zstd")

  private def compressible(n: Int): Array[Byte] = Array.tabulate(n)(i => ((i / 64) % 7 + 'a').toByte)

  private def incompressible(n: Int): Array[Byte] = { val a = new Array[Byte](n); new java.util.Random(7).nextBytes(a); a }

  /** Compresses `data` at a non-zero offset of a direct buffer and decompresses it at another. */
  private def roundTrip(codec: BlockCodec, data: Array[Byte]): Int = {
    val srcOff = 13
    val src = ByteBuffer.allocateDirect(srcOff + data.length)
    src.put(srcOff, data)
    val dstOff = 7
    val dst = ByteBuffer.allocateDirect(dstOff + codec.maxCompressedLength(data.length))
    val n = codec.compress(src, srcOff, data.length, dst, dstOff)
    assert(n > 0 && n <= codec.maxCompressedLength(data.length))
    assert(src.position() == 0 && dst.position() == 0, "positions are left alone")
    val outOff = 5
    val out = ByteBuffer.allocateDirect(outOff + data.length)
    codec.decompress(dst, dstOff, n, out, outOff, data.length)
    val back = new Array[Byte](data.length)
    out.get(outOff, back)
    assert(back.sameElements(data), s"${codec.name} did not round-trip ${data.length} bytes")
    n
  }

  codecs.foreach { name =>
    test(s"$name round-trips compressible and incompressible buffers") {
      val codec = BlockCodec.forSparkCodec(name, 1)
      assert(codec.name == name)
      Seq(1, 100, 4096, 32 * 1024).foreach { n =>
        val c = roundTrip(codec, compressible(n))
        if (n >= 4096) assert(c < n / 4, s"$name should shrink repetitive data: $c of $n")
        roundTrip(codec, incompressible(n))
      }
    }

    test(s"$name round-trips buffers of large segment sizes (up to 1m)") {
      val codec = BlockCodec.forSparkCodec(name, 1)
      Seq(64 * 1024, 128 * 1024 + 3, 1 << 20).foreach { n =>
        roundTrip(codec, compressible(n))
        roundTrip(codec, incompressible(n))
      }
    }

    test(s"$name refuses data that does not decompress to the expected length") {
      val codec = BlockCodec.forSparkCodec(name, 1)
      val data = compressible(4096)
      val src = ByteBuffer.allocateDirect(data.length); src.put(0, data)
      val dst = ByteBuffer.allocateDirect(codec.maxCompressedLength(data.length))
      val n = codec.compress(src, 0, data.length, dst, 0)
      val out = ByteBuffer.allocateDirect(8192)
      val e = intercept[BlockCodec.CorruptBlockException](codec.decompress(dst, 0, n, out, 0, data.length + 100))
      assert(e.getMessage.startsWith(s"$name: "), e.getMessage)
    }

    test(s"$name never writes beyond the raw length it is given, whatever the data declares") {
      val codec = BlockCodec.forSparkCodec(name, 1)
      val data = compressible(4096)
      val src = ByteBuffer.allocateDirect(data.length); src.put(0, data)
      val dst = ByteBuffer.allocateDirect(codec.maxCompressedLength(data.length))
      val n = codec.compress(src, 0, data.length, dst, 0)
      // The buffer's header says 1000 bytes; the data itself holds 4096.
      val (outOff, rawLength) = (16, 1000)
      val out = ByteBuffer.allocateDirect(8192)
      (0 until out.capacity()).foreach(i => out.put(i, 0x5a.toByte))
      val e = intercept[BlockCodec.CorruptBlockException](codec.decompress(dst, 0, n, out, outOff, rawLength))
      assert(e.getMessage.startsWith(s"$name: "), e.getMessage)
      val overwritten = ((0 until outOff) ++ (outOff + rawLength until out.capacity())).count(i => out.get(i) != 0x5a)
      assert(overwritten == 0, s"$name wrote $overwritten bytes outside [$outOff, ${outOff + rawLength})")
    }

    test(s"$name fails garbage with an error naming the codec, and refuses a raw length beyond the destination") {
      val codec = BlockCodec.forSparkCodec(name, 1)
      val garbage = incompressible(300)
      val src = ByteBuffer.allocateDirect(garbage.length); src.put(0, garbage)
      val out = ByteBuffer.allocateDirect(4096)
      val e = intercept[BlockCodec.CorruptBlockException](codec.decompress(src, 0, garbage.length, out, 0, 2000))
      assert(e.getMessage.startsWith(s"$name: "), e.getMessage)
      val beyond = intercept[BlockCodec.CorruptBlockException](codec.decompress(src, 0, garbage.length, out, 100, 4000))
      assert(beyond.getMessage.contains("cannot decompress 4000 bytes at offset 100 of a 4096-byte buffer"), beyond.getMessage)
    }
  }

  /** An LZF chunk: "ZV", type 1 (compressed), its compressed and decompressed lengths, then `body`. */
  private def lzfChunk(rawLength: Int, body: Array[Byte]): Array[Byte] =
    Array[Byte]('Z', 'V', 1, (body.length >> 8).toByte, body.length.toByte, (rawLength >> 8).toByte, rawLength.toByte) ++ body

  test("lzf: hostile chunks fail with an error naming lzf, never reading or writing outside the data") {
    val codec = BlockCodec.forSparkCodec("lzf", 1)
    val literal13 = Array[Byte](12) ++ Array.tabulate[Byte](13)(i => (i + 1).toByte)
    val cases: Seq[(String, Array[Byte], Int)] = Seq(
      // A back reference to 17 bytes before the start of the output, then 13 literal bytes.
      ("a back reference before the start", lzfChunk(16, Array[Byte](0x20, 0x10) ++ literal13), 16),
      // A long back reference (3 bytes) to 8190 bytes back, at the start.
      ("a long back reference before the start", lzfChunk(300, Array[Byte](0xff.toByte, 0x80.toByte, 0xfd.toByte)), 300),
      // A literal run of 32 bytes with only 5 of them in the chunk.
      ("a literal run beyond the input", lzfChunk(32, Array[Byte](31, 1, 2, 3, 4, 5)), 32),
      // The chunk declares 60000 decompressed bytes for a 100-byte buffer.
      ("a declared length beyond the buffer", lzfChunk(60000, literal13), 100),
      // A compressed length beyond the end of the data.
      ("a chunk longer than the data", lzfChunk(16, literal13).take(10), 16),
      ("a missing ZV signature", Array[Byte]('Z', 'X', 0, 0, 1, 7), 1))
    cases.foreach { case (what, hostile, rawLength) =>
      val src = ByteBuffer.allocateDirect(hostile.length); src.put(0, hostile)
      val out = ByteBuffer.allocateDirect(64 * 1024)
      val e = intercept[BlockCodec.CorruptBlockException](codec.decompress(src, 0, hostile.length, out, 0, rawLength))
      assert(e.getMessage.startsWith("lzf: "), s"$what: ${e.getMessage}")
    }
  }

  test("Spark's codec class names and short names both select the codec") {
    assert(BlockCodec.forSparkCodec("org.apache.spark.io.LZ4CompressionCodec", 1).name == "lz4")
    assert(BlockCodec.forSparkCodec("org.apache.spark.io.LZFCompressionCodec", 1).name == "lzf")
    assert(BlockCodec.forSparkCodec("org.apache.spark.io.SnappyCompressionCodec", 1).name == "snappy")
    assert(BlockCodec.forSparkCodec("org.apache.spark.io.ZStdCompressionCodec", 1).name == "zstd")
    assert(BlockCodec.forSparkCodec(" ZSTD ", 3).name == "zstd")
    val e = intercept[IllegalArgumentException](BlockCodec.forSparkCodec("brotli", 1))
    assert(e.getMessage.contains("brotli") && e.getMessage.contains("spark.io.compression.codec"))
  }
}
