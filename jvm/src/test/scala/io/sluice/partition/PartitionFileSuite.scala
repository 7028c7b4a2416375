package io.sluice.partition

import java.io.{ByteArrayOutputStream, File}
import java.nio.channels.Channels

import io.netty.buffer.{ByteBuf, Unpooled}
import io.sluice.buffer.BlockCodec
import io.sluice.partition.TestingLocalDirs._
import org.scalatest.funsuite.AnyFunSuite

class PartitionFileSuite extends AnyFunSuite {

  private def buf(bytes: Array[Byte]): ByteBuf = Unpooled.directBuffer(math.max(1, bytes.length)).writeBytes(bytes)

  private def read(s: SpilledBuffer): Array[Byte] = {
    val b = Unpooled.directBuffer(s.storedLength)
    try { s.readInto(b); val a = new Array[Byte](b.readableBytes()); b.readBytes(a); a } finally b.release()
  }

  test("buffers read back per subpartition in the order they were written") {
    withTempDir { dir =>
      val f = new PartitionFile(new File(dir, "p.data"), 3, None)
      val data = (0 until 30).map(i => Array.tabulate(100 + i * 50)(j => (i + j).toByte))
      data.zipWithIndex.foreach { case (d, i) => val b = buf(d); f.write(i % 2, b); assert(b.readableBytes() == d.length); b.release() }
      val empty = buf(Array.emptyByteArray)
      f.write(2, empty) // empty buffers are not stored
      empty.release()
      intercept[java.io.IOException](f.buffer(0, 0).readInto(Unpooled.directBuffer(10)))
      f.finishWriting()
      assert(f.isFinished)
      assert(f.numBuffers(0) == 15 && f.numBuffers(1) == 15 && f.numBuffers(2) == 0)
      (0 until 15).foreach { i =>
        assert(read(f.buffer(0, i)).sameElements(data(2 * i)))
        assert(read(f.buffer(1, i)).sameElements(data(2 * i + 1)))
      }
      assert(f.storedBytes(0) == data.indices.filter(_ % 2 == 0).map(data(_).length).sum)
      assert(f.size == data.map(_.length).sum)
      assert(f.path.length() == f.size)
      val late = buf(Array[Byte](1))
      intercept[IllegalArgumentException](f.write(0, late))
      late.release()
      f.delete()
      assert(!f.path.exists())
    }
  }

  test("a spilled buffer goes to a channel as a file region, from any position") {
    withTempDir { dir =>
      val f = new PartitionFile(new File(dir, "p.data"), 1, Some(BlockCodec.forSparkCodec("zstd", 1)))
      val data = Array.tabulate(5000)(j => (j % 13).toByte)
      val b = buf(data); f.write(0, b); b.release()
      f.finishWriting()
      val s = f.buffer(0, 0)
      assert(s.isCompressed && s.rawLength == 5000 && s.storedLength < 5000)
      val region = s.toFileRegion
      assert(region.count() == s.storedLength)
      val out = new ByteArrayOutputStream()
      val ch = Channels.newChannel(out)
      var pos = 0L
      while (pos < region.count()) pos += region.transferTo(ch, pos)
      assert(region.transferred() == region.count())
      assert(out.toByteArray.sameElements(read(s)))
      assert(region.release())
      f.delete()
    }
  }

  test("the file name must be new: a partition never overwrites another's file") {
    withTempDir { dir =>
      val path = new File(dir, "taken.data")
      assert(path.createNewFile())
      intercept[java.nio.file.FileAlreadyExistsException](new PartitionFile(path, 1, None))
    }
  }
}
