package io.sluice.partition

import java.io.File

import io.netty.buffer.{ByteBuf, Unpooled}
import io.sluice.NettyLeakDetection
import io.sluice.buffer.BlockCodec
import io.sluice.partition.TestingFileHandles.openUnder
import io.sluice.partition.TestingLocalDirs._
import org.apache.spark.unsafe.Platform
import org.scalatest.funsuite.AnyFunSuite

/** The partition file: its index, its write path, checksums and who holds its file handles. */
class PartitionedFileSuite extends AnyFunSuite with NettyLeakDetection {

  private def buf(bytes: Array[Byte]): ByteBuf = Unpooled.directBuffer(math.max(1, bytes.length)).writeBytes(bytes)

  private def read(s: SpilledBuffer): Array[Byte] = {
    val b = Unpooled.directBuffer(s.storedLength)
    try { s.readInto(b); val a = new Array[Byte](b.readableBytes()); b.readBytes(a); a }
    finally b.release()
  }

  test("buffers read back per subpartition in the order they were written") {
    withTempDir { dir =>
      val f = PartitionedFile.create(new File(dir, "p.data"), 3, None)
      val data = (0 until 30).map(i => Array.tabulate(100 + i * 50)(j => (i + j).toByte))
      data.zipWithIndex.foreach { case (d, i) =>
        val b = buf(d); f.write(i % 2, b); assert(b.readableBytes() == d.length); b.release()
      }
      val empty = buf(Array.emptyByteArray)
      f.write(2, empty) // empty buffers are not stored
      empty.release()
      val early = Unpooled.directBuffer(10)
      try intercept[java.io.IOException](f.buffer(0, 0).readInto(early))
      finally early.release()
      f.finishWriting()
      assert(f.isFinished)
      assert(f.numBuffers(0) == 15 && f.numBuffers(1) == 15 && f.numBuffers(2) == 0)
      (0 until 15).foreach { i =>
        assert(read(f.buffer(0, i)).sameElements(data(2 * i)))
        assert(read(f.buffer(1, i)).sameElements(data(2 * i + 1)))
      }
      assert(f.subpartitionSizes.toSeq == Seq(0, 1).map(s =>
        data.indices.filter(_ % 2 == s).map(data(_).length).sum.toLong) :+ 0L)
      assert(f.size == data.map(_.length).sum)
      assert(f.path.length() == f.size)
      val late = buf(Array[Byte](1))
      intercept[IllegalArgumentException](f.write(0, late))
      late.release()
      assert(f.indexPath.exists() && f.indexPath.getParentFile == f.path.getParentFile, "the index lies beside the data")
      f.delete()
      assert(!f.path.exists() && !f.indexPath.exists(), "deleted with its index")
      intercept[java.io.IOException](f.numBuffers(0))
    }
  }

  test("the file name must be new: a partition never overwrites another's file") {
    withTempDir { dir =>
      val path = new File(dir, "taken.data")
      assert(path.createNewFile())
      intercept[java.nio.file.FileAlreadyExistsException](PartitionedFile.create(path, 1, None))
    }
  }

  Seq(None, Some("zstd")).foreach { codecName =>
    test(s"beginBuffer / endBuffer store the bytes written at the address it gives (codec $codecName)") {
      withTempDir { dir =>
        val codec = codecName.map(BlockCodec.forSparkCodec(_, 1))
        val f = PartitionedFile.create(new File(dir, "p.data"), 2, codec)
        val data = (0 until 200).map(i => Array.tabulate(3000 + i * 13)(j => ((i * j) % 11).toByte))
        data.zipWithIndex.foreach { case (d, i) =>
          val at = f.beginBuffer(8192)
          Platform.copyMemory(d, Platform.BYTE_ARRAY_OFFSET, null, at, d.length)
          f.endBuffer(i % 2, d.length)
        }
        f.beginBuffer(8192)
        f.endBuffer(1, 0) // an empty buffer is not stored
        intercept[IllegalStateException](f.endBuffer(0, 1)) // nothing begun
        f.finishWriting()
        assert(f.numBuffers(0) == 100 && f.numBuffers(1) == 100 && f.numBuffersTotal == 200)
        (0 until 100).foreach { i =>
          Seq(0, 1).foreach { s =>
            val b = f.buffer(s, i)
            assert(b.isCompressed == codec.isDefined)
            val stored = read(b)
            val raw = if (!b.isCompressed) stored
            else {
              val out = java.nio.ByteBuffer.allocateDirect(b.rawLength)
              val in = java.nio.ByteBuffer.allocateDirect(stored.length).put(stored)
              codec.get.decompress(in, 0, stored.length, out, 0, b.rawLength)
              val a = new Array[Byte](b.rawLength); out.get(0, a); a
            }
            assert(raw.sameElements(data(2 * i + s)), s"buffer $i of subpartition $s")
          }
        }
        intercept[IndexOutOfBoundsException](f.buffer(0, 100))
        f.delete()
      }
    }
  }

  test("the writer's handle is closed by finishWriting; each reader opens and closes its own") {
    assume(TestingFileHandles.isSupported, "needs /proc/self/fd")
    withTempDir { dir =>
      val f = PartitionedFile.create(new File(dir, "p.data"), 1, None)
      assert(openUnder(dir) == 1)
      val b = buf(Array.fill[Byte](5000)(3)); f.write(0, b); b.release()
      intercept[java.io.IOException](PartitionedFileReader.open(f)) // not complete yet
      f.finishWriting()
      assert(openUnder(dir) == 0, "a finished file holds no handle")
      val r1 = PartitionedFileReader.open(f)
      val r2 = PartitionedFileReader.open(f)
      assert(openUnder(dir) == 2, "one handle per reader")
      assert(r1.tryRetain())
      r1.release()
      assert(openUnder(dir) == 2)
      r1.release()
      assert(openUnder(dir) == 1 && !r1.tryRetain() && r1.refCnt == 0)
      intercept[IllegalStateException](r1.release())
      intercept[java.io.IOException](r1.readIndexRange(0, 1, keepIndexOpen = false))
      assert(r2.readIndexRange(0, 1, keepIndexOpen = false).size == 1 && openUnder(dir) == 1, "read, closed at once")
      assert(r2.readIndexRange(0, 1, keepIndexOpen = true).size == 1 && openUnder(dir) == 2, "the index beside the data")
      assert(r2.readIndexRange(0, 1, keepIndexOpen = true).size == 1 && openUnder(dir) == 2, "kept, opened once")
      f.delete()
      assert(!f.path.exists())
      val target = Unpooled.directBuffer(5000)
      try {
        r2.read(0, 5000, target) // an open handle of a deleted file still reads (POSIX)
        assert(target.readableBytes() == 5000 && target.getByte(4999) == 3)
      } finally target.release()
      r2.release()
      assert(openUnder(dir) == 0)
      intercept[java.io.IOException](PartitionedFileReader.open(f))
    }
  }

  test("delete while writing closes the writer's handle and fails further writes") {
    withTempDir { dir =>
      val f = PartitionedFile.create(new File(dir, "p.data"), 1, None)
      val b = buf(Array.fill[Byte](100)(1))
      f.write(0, b)
      f.delete()
      assert(!f.path.exists() && !f.indexPath.exists())
      intercept[java.io.IOException](f.write(0, b))
      b.release()
      f.abortWriting()
      if (TestingFileHandles.isSupported) assert(openUnder(dir) == 0)
    }
  }
}
