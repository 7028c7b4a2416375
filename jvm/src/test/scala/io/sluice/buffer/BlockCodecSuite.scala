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
      intercept[Exception](codec.decompress(dst, 0, n, out, 0, data.length + 100))
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
