package io.sluice.partition

import scala.collection.mutable.ArrayBuffer

import io.sluice.NettyLeakDetection
import io.sluice.memory.TestingBufferPools._
import io.sluice.partition.TestingLocalDirs._
import io.sluice.partition.TestingRecords._
import io.sluice.partition.TestingResultPartitions._
import org.scalatest.funsuite.AnyFunSuite

/**
 * Which layout a sort-merge partition's data buffer takes, how it changes with the pool, and what
 * the hash-based layout writes. Both layouts' common behaviour is in [[SortMergeResultPartitionBehaviours]].
 */
class DataBufferLayoutSuite extends AnyFunSuite with NettyLeakDetection {

  private val Segment = 32 * 1024

  test("hash-based from two buffers per subpartition: 256 of 512 (16 MiB of 32 KiB segments) yes, 257 no") {
    assert(DataBuffer.hashBased(256, 512))
    assert(!DataBuffer.hashBased(257, 512))
    assert(DataBuffer.hashBased(1, 2) && !DataBuffer.hashBased(1, 1))
    assert(!DataBuffer.hashBased(4000, 24))
    assert(!DataBuffer.hashBased(Int.MaxValue, Int.MaxValue), "no overflow")
  }

  test("a new partition takes the layout its pool's share calls for") {
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val few = blocking(global, dir, 4, poolMax = 16, producerId = 1)
        val many = blocking(global, dir, 9, poolMax = 16, producerId = 2)
        assert(few.isHashBased && !many.isHashBased)
        Seq(few, many).foreach { p => p.finish(); p.release(null) }
      }
    }
  }

  test("the layout follows the pool at each spill: hash-based, sort-based while other pools take the memory, hash-based again") {
    withNetworkBufferPool(32, Segment) { global =>
      withTempDir { dir =>
        val p = blocking(global, dir, 4, poolMax = 16)
        val written = IndexedSeq.fill(4)(new ArrayBuffer[Array[Byte]]())
        var seq = 0
        def writeUntilSpill(): Unit = {
          val spills = p.numSpills
          while (p.numSpills == spills) {
            val ch = seq % 4
            val r = record(ch, seq, 3000)
            emit(p, ch, r)
            written(ch) += r
            seq += 1
          }
        }
        assert(p.isHashBased)
        writeUntilSpill()
        assert(p.isHashBased, "16 buffers for 4 subpartitions")
        // Another pool requires 28 of the 32 buffers: this one's share falls to 4, one per subpartition.
        val other = global.createBufferPool(28, 28, "another partition")
        assert(p.bufferPool.numBuffers == 4)
        writeUntilSpill()
        assert(!p.isHashBased, "4 buffers for 4 subpartitions: sort-based from this spill on")
        assert(p.numQueuedBuffers <= 4, "the spill gave the buffers beyond the new share back")
        writeUntilSpill()
        assert(!p.isHashBased)
        other.lazyDestroy()
        assert(p.bufferPool.numBuffers == 16)
        writeUntilSpill()
        assert(p.isHashBased, "the memory is back")
        p.finish()
        (0 until 4).foreach(ch => assert(sameRecords(readRange(p, ch, ch + 1), written(ch).toSeq), s"subpartition $ch"))
        info(s"$seq records in ${p.numSpills} regions")
        p.release(null)
      }
    }
  }

  test("hash-based: a frame header that starts 1, 2 or 3 bytes before a buffer's end runs on into the next") {
    withNetworkBufferPool(16, Segment) { global =>
      withTempDir { dir =>
        val p = blocking(global, dir, 2, poolMax = 8, hashBased = (_, _) => true)
        // 4 + (S - 5) leaves 1 byte; 3 + 10, then 4 + (S - 19) leave 2; 2 + 7, then 4 + (S - 16) leave 3.
        val sizes = Seq(Segment - 5, 10, Segment - 19, 7, Segment - 16, 0, 1)
        val records = sizes.zipWithIndex.map { case (n, i) => bytes(1, i, n) }
        records.foreach(emit(p, 1, _))
        p.finish()
        assert(p.file.size == sizes.map(_ + 4).sum, "the file holds exactly the frames")
        assert(sameRecords(readRange(p, 1, 1 + 1), records))
        assert(p.file.numBuffers(0) == 0)
        p.release(null)
      }
    }
  }

  test("hash-based: each region holds a subpartition's full buffers and at most one part-filled last one") {
    withNetworkBufferPool(32, Segment) { global =>
      withTempDir { dir =>
        val p = blocking(global, dir, 4, poolMax = 12)
        assert(p.isHashBased)
        val written = IndexedSeq.fill(4)(new ArrayBuffer[Array[Byte]]())
        val frameBytes = Array.fill(4)(0L)
        val random = new java.util.Random(3)
        (0 until 20000).foreach { i =>
          val ch = random.nextInt(4)
          val r = record(ch, i, 200)
          emit(p, ch, r)
          written(ch) += r
          frameBytes(ch) += r.length + 4
        }
        assert(p.numQueuedBuffers <= 12)
        p.finish()
        val spills = p.numSpills
        assert(spills > 1)
        assert(p.file.size == frameBytes.sum, "uncompressed, the file holds exactly the frames")
        (0 until 4).foreach { s =>
          val sizes = (0 until p.file.numBuffers(s)).map(p.file.buffer(s, _).storedLength)
          assert(sizes.forall(_ <= Segment))
          assert(sizes.count(_ < Segment) <= spills, s"subpartition $s: one part-filled buffer per region at most")
          assert(sizes.size <= frameBytes(s) / Segment + spills, s"subpartition $s")
          assert(sameRecords(readRange(p, s, s + 1), written(s).toSeq), s"subpartition $s")
        }
        info(s"${frameBytes.sum} bytes in $spills regions, ${p.file.numBuffersTotal} buffers")
        p.release(null)
      }
    }
  }
}
