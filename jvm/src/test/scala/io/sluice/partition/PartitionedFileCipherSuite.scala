package io.sluice.partition

import java.io.File
import java.nio.charset.StandardCharsets
import java.nio.file.Files
import javax.crypto.Cipher
import javax.crypto.spec.{IvParameterSpec, SecretKeySpec}

import scala.util.Random

import io.netty.buffer.{ByteBuf, Unpooled}
import io.sluice.buffer.BlockCodec
import io.sluice.memory.NetworkBufferPool
import io.sluice.partition.TestingLocalDirs._
import org.scalatest.funsuite.AnyFunSuite

/** Spark's I/O encryption of partition files: the cipher, the IVs, and files written and read back encrypted. */
class PartitionedFileCipherSuite extends AnyFunSuite {

  private val key = Array.tabulate[Byte](16)(i => (i * 11 + 3).toByte)
  private def cipher = PartitionedFileCipher(key, "AES/CTR/NoPadding")

  private val Marker = "SLUICE-SECRET-MARKER".getBytes(StandardCharsets.US_ASCII)

  private def contents(b: ByteBuf): Array[Byte] = {
    val a = new Array[Byte](b.readableBytes()); b.getBytes(b.readerIndex(), a); a
  }

  private def contains(haystack: Array[Byte], needle: Array[Byte]): Boolean = haystack.indexOfSlice(needle.toSeq) >= 0

  test("a buffer ciphered chunk by chunk equals AES/CTR over the whole buffer, and decrypts back, on any kind of buffer") {
    val bc = cipher.newBufferCipher()
    val r = new Random(3)
    for (len <- Seq(1, 15, 16, 17, 4096, 16 * 1024, 16 * 1024 + 5, 100000)) {
      val plain = Array.tabulate[Byte](len)(_ => r.nextInt().toByte)
      val iv = BufferIv(r.nextLong(), r.nextLong())
      val expected = {
        val ivBytes = new Array[Byte](16); iv.copyTo(ivBytes)
        val c = Cipher.getInstance("AES/CTR/NoPadding")
        c.init(Cipher.ENCRYPT_MODE, new SecretKeySpec(key, "AES"), new IvParameterSpec(ivBytes))
        c.doFinal(plain)
      }
      val direct = Unpooled.directBuffer(len).writeBytes(plain)
      bc.encrypt(direct.memoryAddress(), len, iv)
      assert(contents(direct).sameElements(expected), s"$len bytes, direct")
      val heap = Unpooled.buffer(len + 7).writerIndex(7).readerIndex(7).writeBytes(expected)
      val composite = Unpooled.compositeBuffer().addComponents(true, Unpooled.wrappedBuffer(expected.take(len / 2)),
        Unpooled.wrappedBuffer(expected.drop(len / 2)))
      for (b <- Seq(direct, heap, composite)) {
        bc.decrypt(b, b.readerIndex(), len, iv)
        assert(contents(b).sameElements(plain), s"$len bytes, ${b.getClass.getSimpleName}")
        b.release()
      }
    }
  }

  test("IVs: a file's buffers count from its random IV plus their offset, carrying into the high half") {
    assert(BufferIv(5, 10).plus(6) == BufferIv(5, 16))
    assert(BufferIv(5, -1L).plus(1) == BufferIv(6, 0))
    assert(BufferIv(-1L, -2L).plus(3) == BufferIv(0, 1), "wraps like CTR's 128-bit counter")
    val bytes = new Array[Byte](16)
    BufferIv(0x0102030405060708L, 0x090a0b0c0d0e0f10L).copyTo(bytes)
    assert(bytes.sameElements((1 to 16).map(_.toByte)))
    val c = cipher
    assert(c.newFileIv() != c.newFileIv(), "every file draws its own IV")
  }

  test("Spark's settings: only AES/CTR/NoPadding and AES keys are accepted, refused naming the key") {
    for (bits <- Seq(128, 192, 256))
      assert(PartitionedFileCipher(new Array[Byte](bits / 8), "AES/CTR/NoPadding").keySizeBits == bits)
    assert(PartitionedFileCipher(key, "aes/ctr/nopadding").keySizeBits == 128)
    for (t <- Seq("AES/CBC/PKCS5Padding", "AES/GCM/NoPadding", "DES/CTR/NoPadding", "")) {
      val e = intercept[IllegalArgumentException](PartitionedFileCipher(key, t))
      assert(e.getMessage.contains("spark.io.crypto.cipher.transformation=" + t) && e.getMessage.contains("AES/CTR/NoPadding"),
        e.getMessage)
    }
    val e = intercept[IllegalArgumentException](PartitionedFileCipher(new Array[Byte](10), "AES/CTR/NoPadding"))
    assert(e.getMessage.contains("80 bits") && e.getMessage.contains("spark.io.encryption.keySizeBits"), e.getMessage)
  }

  /** Records carrying the marker, written through a file with or without encryption and a codec. */
  private def writeMarked(
      dir: File, codec: Option[BlockCodec], fileCipher: Option[PartitionedFileCipher]): (PartitionedFile, Seq[Array[Byte]]) = {
    val f = PartitionedFile.create(new File(dir, s"p-${System.nanoTime()}.part"), 2, codec, fileCipher)
    val r = new Random(5)
    val data = (0 until 40).map(i => Marker ++ Array.tabulate[Byte](200 + i * 97)(_ => r.nextInt(4).toByte) ++ Marker)
    data.zipWithIndex.foreach { case (d, i) =>
      val b = Unpooled.directBuffer(d.length).writeBytes(d)
      f.write(i % 2, b)
      b.release()
    }
    f.finishWriting()
    (f, data)
  }

  for (codec <- Seq(None, Some("lz4"))) {
    test(s"a marker in the records is absent from an encrypted file and readers get the exact bytes back (codec $codec)") {
      withTempDir { dir =>
        val c = Some(cipher)
        val (f, data) = writeMarked(dir, codec.map(BlockCodec.forSparkCodec(_, 1)), c)
        assert(f.isEncrypted)
        val onDisk = Files.readAllBytes(f.path.toPath)
        assert(onDisk.length == f.size, "encryption costs no space")
        assert(!contains(onDisk, Marker), "the marker must not appear in the encrypted file")
        val read = for (s <- 0 until 2; i <- 0 until f.numBuffers(s)) yield {
          val b = f.buffer(s, i)
          assert(b.isEncrypted && b.iv != null)
          val out = TestingResultPartitions.readSpilled(b, codec.map(BlockCodec.forSparkCodec(_, 1)), c)
          try contents(out)
          finally out.release()
        }
        assert(read.map(_.toSeq) == (data.indices.filter(_ % 2 == 0) ++ data.indices.filter(_ % 2 == 1)).map(data(_).toSeq))
        // The IVs of two buffers are never the same, nor are their ciphertexts for equal plain text.
        val ivs = for (s <- 0 until 2; i <- 0 until f.numBuffers(s)) yield f.buffer(s, i).iv
        assert(ivs.distinct.size == ivs.size)
        f.delete()
      }
    }
  }

  test("without encryption the marker is in the file: the test above can fail") {
    withTempDir { dir =>
      val (f, _) = writeMarked(dir, None, None)
      assert(!f.isEncrypted && f.buffer(0, 0).iv == null)
      assert(contains(Files.readAllBytes(f.path.toPath), Marker))
      f.delete()
    }
  }

  test("a spilled buffer is read as it lies in the file, encrypted; a flipped byte fails the checksum") {
    withTempDir { dir =>
      val (f, data) = writeMarked(dir, None, Some(cipher))
      val s = f.buffer(0, 3)
      val stored = io.netty.buffer.Unpooled.buffer(s.storedLength)
      val out =
        try { s.readInto(stored); io.netty.buffer.ByteBufUtil.getBytes(stored) }
        finally stored.release()
      val onDisk = Files.readAllBytes(f.path.toPath).slice(s.offset.toInt, s.offset.toInt + s.storedLength)
      assert(out.sameElements(onDisk) && !contains(onDisk, Marker))
      val back = TestingResultPartitions.readSpilled(s, None, Some(cipher))
      assert(contents(back).sameElements(data(6)))
      back.release()

      val raf = new java.io.RandomAccessFile(f.path, "rw")
      try { raf.seek(s.offset + 10); val x = raf.read(); raf.seek(s.offset + 10); raf.write(x ^ 1) }
      finally raf.close()
      val e = intercept[AssertionError](TestingResultPartitions.readSpilled(s, None, Some(cipher)))
      assert(e.getMessage.contains("checksum mismatch"))
      f.delete()
    }
  }

  test("a sort-merge partition spills encrypted regions that views read back exactly") {
    withTempDir { dir =>
      val global = new NetworkBufferPool(16, 4096)
      val c = Some(cipher)
      val p = TestingResultPartitions.blocking(global, dir, 3, 2, cipher = c)
      val records = (0 until 600).map(i => (i % 3, Marker ++ s"record-$i".getBytes(StandardCharsets.US_ASCII)))
      records.foreach { case (s, r) => TestingResultPartitions.emit(p, s, r) }
      p.finish()
      assert(p.numSpills > 1, "several regions")
      assert(!contains(Files.readAllBytes(p.file.path.toPath), Marker))
      for (s <- 0 until 3) {
        val reader = new TestingElementReader
        assert(TestingResultPartitions.drain(p.createSubpartitionView(s, s + 1, NoOpBufferAvailabilityListener), reader,
            cipher = c))
        assert(reader.records.map(_.toSeq) == records.filter(_._1 == s).map(_._2.toSeq))
      }
      p.release(null)
      global.destroy()
    }
  }
}
