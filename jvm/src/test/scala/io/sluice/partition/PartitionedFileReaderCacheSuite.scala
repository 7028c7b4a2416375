package io.sluice.partition

import java.io.IOException
import java.util.concurrent.atomic.{AtomicBoolean, AtomicInteger}

import io.netty.buffer.Unpooled
import io.sluice.{NettyLeakDetection, TestingThread}
import io.sluice.TestingThreads.eventually
import io.sluice.memory.NetworkBufferPool
import io.sluice.memory.TestingBufferPools._
import io.sluice.partition.TestingFileHandles.openUnder
import io.sluice.partition.TestingLocalDirs._
import io.sluice.partition.TestingResultPartitions.emit
import org.scalatest.funsuite.AnyFunSuite

/**
 * The server's kept partition-file handles under concurrent use: readers acquiring and reading,
 * files deleted, the executor's idle sweep, all at once; and a release that throws leaks nothing else.
 */
class PartitionedFileReaderCacheSuite extends AnyFunSuite with NettyLeakDetection {

  private def finished(global: NetworkBufferPool, dir: java.io.File, n: Int): IndexedSeq[SortMergeResultPartition] =
    (0 until n).map { i =>
      val p = TestingResultPartitions.blocking(global, dir, 1, poolMax = 2, producerId = i, shuffleId = 5)
      emit(p, 0, TestingRecords.bytes(0, i, 300))
      p.finish()
      p
    }

  test("acquire, delete and idle close from several threads: every read sees its bytes, no handle outlives its readers") {
    assume(TestingFileHandles.isSupported, "needs /proc/self/fd")
    withNetworkBufferPool(64, 4096) { global =>
      withTempDir { dir =>
        val ps = finished(global, dir, 24)
        val cache = new PartitionedFileReaderCache(8) // fewer than the files: some are opened for one reader alone
        val stop = new AtomicBoolean(false)
        val reads = new AtomicInteger
        val readers = (0 until 4).map { t =>
          new TestingThread(s"reader $t")({
            val target = Unpooled.directBuffer(4096)
            try {
              var i = t
              while (!stop.get) {
                val p = ps(i % ps.size)
                try {
                  val b = p.file.buffer(0, 0) // reads the file's index: fails once the file is deleted
                  val r = cache.acquire(p.file)
                  try {
                    target.clear()
                    r.read(b.offset, b.storedLength, target)
                    assert(target.readableBytes == b.storedLength)
                    reads.incrementAndGet()
                  } finally r.release()
                } catch {
                  case e: IOException => assert(p.isReleased, s"${p.file} failed while not deleted: $e")
                }
                i += 1
              }
            } finally target.release()
          })
        }
        val sweeper = new TestingThread("sweeper")({
          while (!stop.get) { cache.closeIdle(System.nanoTime()); Thread.`yield`() }
        })
        // Delete half the files while they are read and swept.
        eventually(what = "200 reads")(reads.get > 200)
        for (p <- ps.indices.filter(_ % 2 == 1).map(ps)) p.release(null)
        val before = reads.get
        eventually(what = "200 more reads")(reads.get > before + 200)
        stop.set(true)
        readers.foreach(_.join())
        sweeper.join()
        assert(ps.filter(_.isReleased).forall(p => !p.file.path.exists()))
        assert(openUnder(dir) <= cache.size && cache.size <= 8, "only kept handles stay open once every reader is done")
        cache.clear()
        assert(cache.size == 0 && openUnder(dir) == 0)
        ps.foreach(_.release(null))
      }
    }
  }

  test("a release that throws in the idle sweep or in clear does not leak the other kept readers") {
    assume(TestingFileHandles.isSupported, "needs /proc/self/fd")
    withNetworkBufferPool(64, 4096) { global =>
      withTempDir { dir =>
        val ps = finished(global, dir, 3)
        for (sweep <- Seq(true, false)) {
          val cache = new PartitionedFileReaderCache(8)
          val kept = ps.map { p =>
            val r = cache.acquire(p.file); r.release(); r
          }
          assert(cache.size == 3 && openUnder(dir) == 3)
          // The middle one is released behind the cache's back: the cache's own release then throws.
          kept(1).release()
          assert(kept(1).refCnt == 0 && openUnder(dir) == 2)
          val e = intercept[IllegalStateException] {
            if (sweep) cache.closeIdle(System.nanoTime()) else cache.clear()
          }
          assert(e.getMessage.contains("released once too often"), e.getMessage)
          assert(cache.size == 0 && kept.forall(_.refCnt == 0) && openUnder(dir) == 0,
            s"every other reader was released too (sweep: $sweep)")
        }
        ps.foreach(_.release(null))
      }
    }
  }
}
