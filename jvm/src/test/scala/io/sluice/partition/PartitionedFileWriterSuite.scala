package io.sluice.partition

import java.io.File
import java.nio.file.Files

import io.netty.buffer.Unpooled
import io.sluice.NettyLeakDetection
import io.sluice.partition.TestingLocalDirs._
import org.scalatest.funsuite.AnyFunSuite

/** The writer of a partition file: staged large writes, buffers back to back in the index. */
class PartitionedFileWriterSuite extends AnyFunSuite with NettyLeakDetection {

  private def write(w: PartitionedFileWriter, subpartition: Int, bytes: Array[Byte]): Unit = {
    val b = Unpooled.directBuffer(bytes.length).writeBytes(bytes)
    try w.write(subpartition, b)
    finally b.release()
  }

  test("buffers are staged, written out in large writes, and indexed back to back") {
    withTempDir { dir =>
      val path = new File(dir, "w.data")
      val index = new PartitionedFileIndex(2)
      val w = new PartitionedFileWriter(path, new File(dir, "w.data.index"), index, None, None, None)
      val data = (0 until 20).map(i => Array.tabulate(1000 + i)(j => (i * j).toByte))
      data.zipWithIndex.foreach { case (d, i) => write(w, i % 2, d) }
      assert(path.length() == 0, "20 small buffers stay in the staging buffer")
      val big = Array.fill[Byte](PartitionedFileWriter.StagingSize + 1)(7)
      write(w, 1, big) // larger than the staging buffer: the staged ones go first, then a larger staging
      w.finish()
      assert(index.size == 21 && path.length() == index.totalStored)
      assert((0 until 21).forall(b => b == 0 || index.offset(b) == index.offset(b - 1) + index.storedLength(b - 1)))
      val bytes = Files.readAllBytes(path.toPath)
      val last = index.offset(20).toInt
      assert(bytes.slice(last, last + big.length).sameElements(big))
      assert(bytes.slice(index.offset(3).toInt, index.offset(4).toInt).sameElements(data(3)))
      val indexFile = new File(dir, "w.data.index")
      assert(indexFile.length() == PartitionedFileIndex.indexFileLength(2, 21), "the index file, written by finish")
    }
  }

  test("a closed channel fails the next write-out; abort gives the staging back and closes the handle") {
    withTempDir { dir =>
      val path = new File(dir, "c.data")
      val w = new PartitionedFileWriter(path, new File(dir, "c.data.index"), new PartitionedFileIndex(1), None, None, None)
      write(w, 0, Array.fill[Byte](100)(1))
      w.closeChannel() // the partition was released under the producer
      intercept[java.io.IOException](w.finish())
      val second =
        new PartitionedFileWriter(new File(dir, "a.data"), new File(dir, "a.data.index"), new PartitionedFileIndex(1), None,
          None, None)
      write(second, 0, Array.fill[Byte](100)(1))
      second.abort()
      second.closeChannel() // idempotent
      assert(!new File(dir, "c.data.index").exists() && !new File(dir, "a.data.index").exists(),
        "no index file for a file that was not finished")
    }
  }
}
