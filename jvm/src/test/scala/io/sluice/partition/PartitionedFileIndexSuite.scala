package io.sluice.partition

import java.io.{File, IOException}
import java.nio.ByteBuffer
import java.nio.channels.FileChannel
import java.nio.file.{Files, StandardCopyOption, StandardOpenOption}

import io.sluice.buffer.BlockCodec
import io.sluice.memory.TestingBufferPools._
import io.sluice.partition.TestingLocalDirs._
import io.sluice.partition.TestingRecords._
import io.sluice.partition.TestingResultPartitions._
import org.scalatest.funsuite.AnyFunSuite

/**
 * The index file of a partition file: every subpartition's entries in the order written, through
 * the regions, read back a range at a time; and a finished blocking partition moved to another
 * executor (decommissioning): its index shipped, its file copied, the partition adopted there and
 * read back record for record; indexes that do not fit are refused by name.
 */
class PartitionedFileIndexSuite extends AnyFunSuite {

  private val Segment = 32 * 1024
  // magic, version, subpartitions, length, buffers, encrypted, IV
  private val Header = 4 + 1 + 4 + 8 + 4 + 1 + 16
  // the migration envelope: magic, version, shuffle, producer
  private val Envelope = 4 + 1 + 4 + 8

  private def writeAll(p: ResultPartition, records: Int, maxRecord: Int, skip: Set[Int] = Set.empty): Unit =
    for (seq <- 0 until records; ch <- 0 until p.numSubpartitions if !skip(ch)) emit(p, ch, record(ch, seq, maxRecord))

  /** `p`'s file copied into `dir` under another name, as the receiving executor gets it. */
  private def copyFile(p: SortMergeResultPartition, dir: File): File = {
    val target = new File(dir, s"received-${p.partitionId.producerId}.part")
    Files.copy(p.file.path.toPath, target.toPath, StandardCopyOption.REPLACE_EXISTING)
    target
  }

  /** Subpartitions [start, end) of the index file `path` of a file of `n` subpartitions and `buffers` buffers. */
  private def range(path: File, n: Int, buffers: Int, start: Int, end: Int): PartitionedFileIndexRange = {
    val ch = FileChannel.open(path.toPath, StandardOpenOption.READ)
    try PartitionedFileIndexRange.read(ch, path, n, buffers, start, end)
    finally ch.close()
  }

  /** (subpartition, offset) of every entry of a range, in the order a reader gets them. */
  private def entries(r: PartitionedFileIndexRange): Seq[(Int, Long)] = {
    var sp = r.start
    (0 until r.size).map { i => sp = r.subpartitionOf(i, sp); sp -> r.offset(i) }
  }

  test("the index file lists each subpartition's buffers through the regions in the order written") {
    withTempDir { dir =>
      val index = new PartitionedFileIndex(4)
      // Region 1: subpartitions 0, 0, 3; region 2: 1, 3; region 3: 0. Subpartition 2 stays empty.
      val written = Seq(0, 0, 3, 1, 3, 0)
      written.zipWithIndex.foreach { case (sp, i) => index.add(sp, i * 100L, 100, if (sp == 1) 250 else -1, i) }
      assert(index.size == 6 && index.totalStored == 600)
      val path = new File(dir, "p.data.index")
      index.writeTo(path, 600L, None)
      assert(path.length() == Header + 4 * 5 + 20 * 6)
      val dirEntries = ByteBuffer.wrap(Files.readAllBytes(path.toPath), Header, 20).asIntBuffer()
      assert((0 until 5).map(dirEntries.get) == Seq(0, 3, 4, 4, 6), "the directory: first entry of each, then the total")
      val all = range(path, 4, 6, 0, 4)
      assert(entries(all) == Seq(0 -> 0L, 0 -> 100L, 0 -> 500L, 1 -> 300L, 3 -> 200L, 3 -> 400L))
      assert(all.rawLength(3) == 250 && all.rawLength(0) == -1 && all.storedLength(5) == 100 && all.crc(2) == 5)
      assert((0 until 4).map(all.count) == Seq(3, 1, 0, 2))
      assert(entries(range(path, 4, 6, 1, 2)) == Seq(1 -> 300L))
      assert(entries(range(path, 4, 6, 2, 4)) == Seq(3 -> 200L, 3 -> 400L), "an empty subpartition is skipped")
      assert(range(path, 4, 6, 2, 3).size == 0)
      val ch = FileChannel.open(path.toPath, StandardOpenOption.READ)
      try assert(PartitionedFileIndexRange.count(ch, path, 6, 1, 4) == 3)
      finally ch.close()
      intercept[java.nio.file.FileAlreadyExistsException](index.writeTo(path, 600L, None))
    }
  }

  test("an index grows past its first arrays; a short or inconsistent index file is refused by name") {
    withTempDir { dir =>
      val index = new PartitionedFileIndex(2)
      (0 until 1000).foreach(i => index.add(i % 2, i * 10L, 10, -1, 0))
      assert(index.size == 1000 && index.totalStored == 10000)
      val path = new File(dir, "p.data.index")
      index.writeTo(path, 10000L, None)
      assert(entries(range(path, 2, 1000, 1, 2)).map(_._2) == (0 until 500).map(i => (2 * i + 1) * 10L))
      val short = new File(dir, "short.index")
      Files.write(short.toPath, Files.readAllBytes(path.toPath).take(Header + 12 + 20 * 600))
      assert(intercept[IOException](range(short, 2, 1000, 1, 2)).getMessage.contains(s"The index $short ends at"))
      assert(intercept[IOException](range(path, 2, 999, 0, 2)).getMessage.contains("own entries [0, 1000) of 999"))
    }
  }

  test("a received index is the file's own index file behind an envelope naming the partition") {
    withNetworkBufferPool(16, Segment) { global =>
      withTempDir { dir =>
        val id = ResultPartitionID(5, 50)
        val p = blocking(global, dir, 3, poolMax = 2, producerId = 50, shuffleId = 5)
        writeAll(p, 600, maxRecord = 3000)
        p.finish()
        val encoded = PartitionedFileIndex.encode(p, p.file.path.length())
        val d = PartitionedFileIndex.decode(id, p.file.path, encoded)
        assert(d.iv.isEmpty && d.numSubpartitions == 3 && d.numBuffers == p.file.numBuffersTotal &&
          d.fileLength == p.file.size)
        val shipped = new Array[Byte](d.indexFile.remaining())
        d.indexFile.get(shipped)
        assert(shipped.sameElements(Files.readAllBytes(p.file.indexPath.toPath)))
        assert(encoded.length == Envelope + shipped.length)
        intercept[IOException](PartitionedFileIndex.encode(p, p.file.path.length() + 1))
        p.release(null)
        intercept[IOException](PartitionedFileIndex.encode(p, 0L))
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
          val index = PartitionedFileIndex.encode(p, p.file.path.length())
          val file = copyFile(p, receiver)
          val adopted = SortMergeResultPartition.adopt(id, PartitionedFile.adopt(id, file, index),
            global.createBufferPool(0, 1, "adopted"))
          assert(adopted.isFinished && adopted.file.isFinished && adopted.numSubpartitions == 5)
          assert(adopted.file.indexPath.exists() && adopted.file.indexPath.getParentFile == receiver, "the index beside it")
          assert(adopted.file.size == p.file.size && adopted.file.numBuffersTotal == p.file.numBuffersTotal)
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
          assert(!file.exists() && !adopted.file.indexPath.exists(), "releasing the adopted partition deletes its files")
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
            PartitionedFile.adopt(id, copyFile(p, receiver), PartitionedFileIndex.encode(p, 0L)),
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
          val index = PartitionedFileIndex.encode(p, length)
          val file = copyFile(p, receiver)
          def refused(i: Array[Byte], target: File = file, as: ResultPartitionID = id): String =
            intercept[IOException](PartitionedFile.adopt(as, target, i)).getMessage

          assert(refused(index, as = ResultPartitionID(3, 31)).contains("index of shuffle 3 producer 30"))
          assert(refused(index.take(index.length - 3)).contains("buffers of 2 subpartitions announced"))
          assert(refused(index.take(10)).contains("ends early"))
          assert(refused(Array.fill(80)(1.toByte)).contains("magic"))
          val short = new File(receiver, "short.part")
          Files.write(short.toPath, Files.readAllBytes(file.toPath).take(100))
          assert(refused(index, short).contains(s"the file has 100 bytes, the index describes $length"))
          val entriesAt = Envelope + Header + 4 * 3
          // An entry pointing outside the file.
          val bad = index.clone()
          ByteBuffer.wrap(bad).putLong(entriesAt, length) // the first buffer's offset
          assert(refused(bad).contains("buffer 0 of subpartition 0") && refused(bad).contains("does not follow the one before"))
          // A subpartition's entries out of the order written.
          val swapped = index.clone()
          ByteBuffer.wrap(swapped).putLong(entriesAt + 20, 0L)
          assert(refused(swapped).contains("buffer 1 of subpartition 0"))
          // A directory that does not add up.
          val directory = index.clone()
          ByteBuffer.wrap(directory).putInt(Envelope + Header + 4, numBuffers(p) + 1)
          assert(refused(directory).contains(s"subpartition 0's entries [0, ${numBuffers(p) + 1})"))
          val otherVersion = index.clone()
          otherVersion(4) = 9
          assert(refused(otherVersion).contains("version 9"))
          val otherFileVersion = index.clone()
          otherFileVersion(Envelope + 4) = 7
          assert(refused(otherFileVersion).contains("index file version 7"))
          assert(file.exists(), "a refused index leaves the file to its caller")
          assert(!PartitionedFile.indexPathOf(file).exists(), "and writes no index beside it")
          p.release(null)
        }
      }
    }
  }

  private def numBuffers(p: SortMergeResultPartition): Int = p.file.numBuffersTotal

  test("the index file: a header, numSubpartitions + 1 directory entries, 20 bytes per stored buffer by subpartition") {
    withNetworkBufferPool(16, Segment) { global =>
      withTempDir { dir =>
        val p = blocking(global, dir, 4, poolMax = 2)
        writeAll(p, 800, maxRecord = 4000, skip = Set(2))
        p.finish()
        assert(p.numSpills > 2)
        val bytes = Files.readAllBytes(p.file.indexPath.toPath)
        val n = p.file.numBuffersTotal
        assert(bytes.length == Header + 4 * 5 + 20 * n, s"${bytes.length} bytes for $n buffers")
        val in = ByteBuffer.wrap(bytes)
        val directory = (0 until 5).map(i => in.getInt(Header + 4 * i))
        assert(directory.head == 0 && directory.last == n && directory(3) == directory(2), "subpartition 2 is empty")
        assert((0 until 4).map(s => directory(s + 1) - directory(s)) == (0 until 4).map(p.file.numBuffers))
        val offsets = (0 until n).map(e => in.getLong(Header + 4 * 5 + 20 * e))
        for (s <- 0 until 4) {
          val own = offsets.slice(directory(s), directory(s + 1))
          assert(own == own.sorted, s"subpartition $s in the order written")
        }
        assert(offsets.distinct.size == n && offsets.min == 0L)
        assert(PartitionedFileIndex.encode(p, p.file.path.length()).length == Envelope + bytes.length)
        p.release(null)
        assert(!p.file.indexPath.exists())
      }
    }
  }

  test("a finished map output keeps nothing per subpartition or per buffer in the heap") {
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        def held(numSubpartitions: Int, hashBased: Boolean): (Long, Long, Int) = {
          val p = blocking(global, dir, numSubpartitions, poolMax = 8, producerId = numSubpartitions,
            hashBased = (_, _) => hashBased)
          writeAll(p, 20, maxRecord = 2000)
          p.finish()
          val stop: AnyRef => Boolean = _.isInstanceOf[io.sluice.memory.NetworkBufferPool]
          val sizes = (TestingHeap.reachableBytes(p.file, stop), TestingHeap.reachableBytes(p, stop),
            p.file.numBuffersTotal)
          assert(readRange(p, 0, numSubpartitions).size == 20 * numSubpartitions)
          p.release(null)
          sizes
        }
        for (hashBased <- Seq(true, false)) {
          val (fileFew, partitionFew, buffersFew) = held(10, hashBased)
          val (fileMany, partitionMany, buffersMany) = held(1000, hashBased)
          assert(buffersMany > 10 * buffersFew, s"$buffersFew and $buffersMany stored buffers")
          info(s"hash-based $hashBased: the file holds $fileFew / $fileMany bytes, the partition $partitionFew / " +
            s"$partitionMany bytes, for 10 / 1000 subpartitions ($buffersFew / $buffersMany stored buffers)")
          // The same path length (producer ids 10 and 1000 differ by 2 characters): up to 8 bytes apart.
          assert(math.abs(fileMany - fileFew) <= 8 && math.abs(partitionMany - partitionFew) <= 8,
            "the same heap whatever the number of subpartitions and buffers")
          assert(fileMany <= 64 + 4 * 1000, s"$fileMany bytes held by a file of 1000 non-empty subpartitions")
        }
      }
    }
  }
}
