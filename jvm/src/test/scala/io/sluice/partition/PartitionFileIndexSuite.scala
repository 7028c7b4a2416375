package io.sluice.partition

import java.io.{File, IOException}
import java.nio.ByteBuffer
import java.nio.file.{Files, StandardCopyOption}

import scala.collection.mutable.ArrayBuffer

import io.sluice.buffer.BlockCodec
import io.sluice.memory.TestingBufferPools._
import io.sluice.partition.TestingLocalDirs._
import io.sluice.partition.TestingRecords._
import io.sluice.partition.TestingResultPartitions._
import org.scalatest.funsuite.AnyFunSuite

/**
 * The index of a partition file: every subpartition's chain through the regions, in the order
 * written; and a finished blocking partition moved to another executor (decommissioning): its
 * index encoded, its file copied, the partition adopted there and read back record for record;
 * indexes that do not fit are refused by name.
 */
class PartitionFileIndexSuite extends AnyFunSuite {

  private val Segment = 32 * 1024
  // magic, version, shuffle, producer, subpartitions, length, buffers, encrypted, IV
  private val Header = 4 + 1 + 4 + 8 + 4 + 8 + 4 + 1 + 16

  private def writeAll(p: ResultPartition, records: Int, maxRecord: Int, skip: Set[Int] = Set.empty): Unit =
    for (seq <- 0 until records; ch <- 0 until p.numSubpartitions if !skip(ch)) emit(p, ch, record(ch, seq, maxRecord))

  /** `p`'s file copied into `dir` under another name, as the receiving executor gets it. */
  private def copyFile(p: SortMergeResultPartition, dir: File): File = {
    val target = new File(dir, s"received-${p.partitionId.producerId}.part")
    Files.copy(p.file.path.toPath, target.toPath, StandardCopyOption.REPLACE_EXISTING)
    target
  }

  /** Buffer offsets of `subpartition`, walking its chain. */
  private def chain(index: PartitionFileIndex, subpartition: Int): Seq[Long] =
    Iterator.iterate(index.first(subpartition))(index.next).takeWhile(_ >= 0).map(index.offset).toSeq

  test("each subpartition's chain runs through the regions in the order written, at the offsets written") {
    val index = new PartitionFileIndex(3)
    // Region 1: subpartitions 0, 0, 2; region 2: 1, 2; region 3: 0. Buffers of 100 bytes, back to back.
    val written = Seq(0, 0, 2, 1, 2, 0)
    written.zipWithIndex.foreach { case (sp, i) => index.add(sp, i * 100L, 100, if (sp == 1) 250 else -1, i) }
    assert(index.size == 6 && index.totalStored == 600)
    assert(chain(index, 0) == Seq(0L, 100L, 500L))
    assert(chain(index, 1) == Seq(300L))
    assert(chain(index, 2) == Seq(200L, 400L))
    assert((0 until 3).map(index.count) == Seq(3, 1, 2))
    assert((0 until 3).map(index.storedBytes) == Seq(300L, 100L, 200L))
    assert(index.subpartitions.toSeq == written, "each buffer's subpartition, in file order")
    assert(index.rawLength(3) == 250 && index.rawLength(0) == -1 && index.storedLength(5) == 100 && index.crc(4) == 4)
  }

  test("an index grows past its first arrays and trims to what was written") {
    val index = new PartitionFileIndex(2)
    assert(index.first(0) == -1 && index.first(1) == -1 && index.size == 0)
    (0 until 1000).foreach(i => index.add(i % 2, i * 10L, 10, -1, 0))
    index.trim()
    assert(index.size == 1000 && index.totalStored == 10000)
    assert(chain(index, 1) == (0 until 500).map(i => (2 * i + 1) * 10L))
    assert(index.first(1) == 1 && index.next(999) == -1)
  }

  test("a decoded index is the encoded one: chains, offsets, lengths and checksums") {
    withNetworkBufferPool(16, Segment) { global =>
      withTempDir { dir =>
        val id = ResultPartitionID(5, 50)
        val p = blocking(global, dir, 3, poolMax = 2, producerId = 50, shuffleId = 5)
        writeAll(p, 600, maxRecord = 3000)
        p.finish()
        val original = p.file.finishedIndex
        val (decoded, iv) = PartitionFileIndex.decode(id, p.file.path, PartitionFileIndex.encode(p, p.file.path.length()))
        assert(iv.isEmpty && decoded.size == original.size && decoded.totalStored == original.totalStored)
        for (sp <- 0 until 3) assert(chain(decoded, sp) == chain(original, sp), s"subpartition $sp")
        for (b <- 0 until original.size) {
          assert(decoded.storedLength(b) == original.storedLength(b) && decoded.rawLength(b) == original.rawLength(b) &&
              decoded.crc(b) == original.crc(b), s"buffer $b")
        }
        p.release(null)
      }
    }
  }

  test("an adopted partition reads exactly the records of the original, every range, as often as asked") {
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { sender =>
        withTempDir { receiver =>
          val codec = Some(BlockCodec.forSparkCodec("lz4", 1))
          val id = ResultPartitionID(7, 123456789L)
          val p = blocking(global, sender, 5, poolMax = 4, codec = codec, producerId = id.producerId, shuffleId = 7)
          writeAll(p, 1000, maxRecord = 3000, skip = Set(3)) // subpartition 3 stays empty
          p.finish()
          assert(p.numSpills > 2, "several regions: each subpartition's buffers are spread over the file")
          val index = PartitionFileIndex.encode(p, p.file.path.length())
          val file = copyFile(p, receiver)
          val adopted = SortMergeResultPartition.adopt(id, PartitionFile.adopt(id, file, index),
            global.createBufferPool(0, 1, "adopted"))
          assert(adopted.isFinished && adopted.file.isFinished && adopted.numSubpartitions == 5)
          assert(adopted.subpartitionSizes.sameElements(p.subpartitionSizes), "the same map output sizes")
          assert(adopted.subpartitionSizes(3) == 0)
          for ((s, e) <- Seq((0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (0, 5), (1, 4))) {
            val original = readRange(p, s, e, codec)
            assert(sameRecords(readRange(adopted, s, e, codec), original), s"subpartitions [$s, $e)")
            assert(sameRecords(readRange(adopted, s, e, codec), original), s"subpartitions [$s, $e), read again")
          }
          assert(readRange(adopted, 0, 5, codec).size == 4 * 1000)
          p.release(null)
          assert(readRange(adopted, 0, 5, codec).size == 4 * 1000, "the copy does not depend on the original")
          adopted.release(null)
          assert(!file.exists(), "releasing the adopted partition deletes its file")
        }
      }
    }
  }

  test("a partition with no data at all moves too") {
    withNetworkBufferPool(16, Segment) { global =>
      withTempDir { sender =>
        withTempDir { receiver =>
          val id = ResultPartitionID(1, 2)
          val p = blocking(global, sender, 3, poolMax = 2, producerId = 2, shuffleId = 1)
          p.finish()
          val adopted = SortMergeResultPartition.adopt(id,
            PartitionFile.adopt(id, copyFile(p, receiver), PartitionFileIndex.encode(p, 0L)),
            global.createBufferPool(0, 1, "adopted"))
          assert(readRange(adopted, 0, 3, None).isEmpty)
          adopted.release(null)
          p.release(null)
        }
      }
    }
  }

  test("an index that is not the file's, not this partition's, or malformed is refused by name") {
    withNetworkBufferPool(16, Segment) { global =>
      withTempDir { sender =>
        withTempDir { receiver =>
          val id = ResultPartitionID(3, 30)
          val p = blocking(global, sender, 2, poolMax = 2, producerId = 30, shuffleId = 3)
          writeAll(p, 500, maxRecord = 2000)
          p.finish()
          val length = p.file.path.length()
          val index = PartitionFileIndex.encode(p, length)
          val file = copyFile(p, receiver)
          def refused(i: Array[Byte], target: File = file, as: ResultPartitionID = id): String =
            intercept[IOException](PartitionFile.adopt(as, target, i)).getMessage

          assert(refused(index, as = ResultPartitionID(3, 31)).contains("index of shuffle 3 producer 30"))
          assert(refused(index.take(index.length - 3)).contains("buffers announced"))
          assert(refused(index.take(10)).contains("ends early"))
          assert(refused(Array.fill(40)(1.toByte)).contains("magic"))
          val short = new File(receiver, "short.part")
          Files.write(short.toPath, Files.readAllBytes(file.toPath).take(100))
          assert(refused(index, short).contains(s"the file has 100 bytes, the index describes $length"))
          // An entry pointing outside the file.
          val bad = index.clone()
          ByteBuffer.wrap(bad).putLong(Header + 4, length) // the first buffer's offset
          assert(refused(bad).contains("does not follow the one before"))
          val otherVersion = index.clone()
          otherVersion(4) = 9
          assert(refused(otherVersion).contains("version 9"))
          assert(file.exists(), "a refused index leaves the file to its caller")
          p.release(null)
        }
      }
    }
  }

  test("the encoded index lists every stored buffer once: 24 bytes each behind a fixed header") {
    withNetworkBufferPool(16, Segment) { global =>
      withTempDir { dir =>
        val p = blocking(global, dir, 4, poolMax = 2)
        writeAll(p, 800, maxRecord = 4000)
        p.finish()
        val index = PartitionFileIndex.encode(p, p.file.path.length())
        val expected = Header + 24 * p.file.numBuffersTotal
        assert(index.length == expected, s"${index.length} bytes, expected $expected")
        val offsets = ArrayBuffer.empty[Long]
        val in = ByteBuffer.wrap(index, Header, index.length - Header)
        while (in.hasRemaining) { in.getInt(); offsets += in.getLong(); in.getInt(); in.getInt(); in.getInt() }
        assert(offsets == offsets.sorted && offsets.distinct.size == offsets.size, "in file order")
        p.release(null)
      }
    }
  }
}
