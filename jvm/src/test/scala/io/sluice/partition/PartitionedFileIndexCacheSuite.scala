package io.sluice.partition

import java.io.File

import io.netty.buffer.Unpooled
import io.sluice.NettyLeakDetection
import io.sluice.partition.TestingFileHandles.openUnder
import io.sluice.partition.TestingLocalDirs._
import org.scalatest.funsuite.AnyFunSuite

/** The executor's cache of index files: its budget, what it refuses to drop, and readers through it. */
class PartitionedFileIndexCacheSuite extends AnyFunSuite with NettyLeakDetection {

  private def file(dir: File, name: String, subpartitions: Int, cache: PartitionedFileIndexCache): PartitionedFile = {
    val f = PartitionedFile.create(new File(dir, name), subpartitions, None, None, cache)
    (0 until subpartitions * 2).foreach { i =>
      val b = Unpooled.directBuffer(100).writeBytes(Array.fill[Byte](10 + i)(i.toByte))
      try f.write(i % subpartitions, b)
      finally b.release()
    }
    f.finishWriting()
    f
  }

  private def key(path: String) = PartitionedFileIndexCache.key(new File(path))

  test("within its budget it keeps what it is given, and drops only entries nobody read for a while") {
    val cache = new PartitionedFileIndexCache(800)
    val (a, b, c) = (key("/x/a"), key("/x/b"), key("/x/c"))
    assert(cache.put(a, new Array[Byte](100)) && cache.put(b, new Array[Byte](100)))
    assert(!cache.put(c, new Array[Byte](101)), "larger than an eighth of the budget")
    assert(cache.size == 200 && cache.numEntries == 2)
    (3 until 9).foreach(i => assert(cache.put(key(s"/x/$i"), new Array[Byte](100))))
    assert(cache.size == 800)
    cache.get(a)
    // Full and every entry read within the last second: the new one is not kept, nothing is dropped.
    assert(!cache.put(c, new Array[Byte](100)) && !cache.put(key("/x/d"), new Array[Byte](100)))
    assert(cache.size == 800 && cache.get(a) != null && cache.get(b) != null)
    Thread.sleep(PartitionedFileIndexCache.IdleMs + 100)
    cache.get(a) // read again: safe; 3, then 4, the least recently used of the idle ones, make room
    assert(cache.put(c, new Array[Byte](100)) && cache.put(key("/x/d"), new Array[Byte](100)))
    assert(cache.get(key("/x/3")) == null && cache.get(key("/x/4")) == null)
    assert(cache.get(a) != null && cache.get(b) != null && cache.get(key("/x/5")) != null && cache.size == 800)
    cache.remove(a)
    assert(cache.get(a) == null && cache.size == 700)
    cache.clear()
    assert(cache.size == 0 && cache.numEntries == 0)
    assert(!new PartitionedFileIndexCache(0).put(a, new Array[Byte](1)))
  }

  test("room is reserved before an index is loaded: kept when filled, given back when cancelled or its file goes") {
    val cache = new PartitionedFileIndexCache(800)
    val (a, b) = (key("/x/a"), key("/x/b"))
    val r = cache.reserve(a, 100)
    assert(r != null && cache.size == 100 && cache.get(a) == null, "reserved, not readable before it is filled")
    assert(cache.reserve(a, 100) == null, "being loaded: another reader reads its own range")
    r.fill(new Array[Byte](100))
    assert(cache.get(a) != null && cache.size == 100)
    cache.reserve(b, 100).cancel()
    assert(cache.size == 100 && cache.numEntries == 1)
    val gone = cache.reserve(b, 100)
    cache.remove(b) // its file was deleted while it loaded
    gone.fill(new Array[Byte](100))
    assert(cache.get(b) == null && cache.size == 100)
    assert(cache.reserve(key("/x/big"), 101) == null, "larger than an eighth of the budget")
  }

  test("an index a reader loaded makes room for another only once readers took its length in ranges from it") {
    val cache = new PartitionedFileIndexCache(800)
    val loaded = (0 until 8).map { i =>
      val r = cache.reserve(key(s"/x/$i"), 100)
      r.fill(new Array[Byte](100))
      r.entry
    }
    loaded(0).serve(60)
    Thread.sleep(PartitionedFileIndexCache.IdleMs + 100)
    assert(cache.reserve(key("/x/new"), 100) == null, "idle, but none paid for its load yet")
    loaded(0).serve(40)
    assert(cache.reserve(key("/x/new"), 100) != null, "the first paid for its load: it makes room")
    assert(cache.get(key("/x/0")) == null && cache.get(key("/x/1")) != null && cache.size == 800)
  }

  test("a file's readers load its whole index at most once; the counters show what was read for what was needed") {
    withTempDir { dir =>
      val cache = new PartitionedFileIndexCache(1 << 20)
      val f = file(dir, "p.data", 3, null) // 6 buffers, 2 per subpartition
      val length = f.indexPath.length()
      assert(length == PartitionedFileIndex.HeaderSize + 4 * 4 + 20 * 6)
      def read(file: PartitionedFile, start: Int, end: Int): Int = {
        val r = PartitionedFileReader.open(file)
        try r.readIndexRange(start, end, keepIndexOpen = false).size
        finally r.release()
      }
      val first = PartitionedFile.restore(f.path, 3, None, f.numBuffersTotal, f.size, cache)
      assert(read(first, 0, 2) == 4)
      assert(cache.indexBytesRead == length && cache.indexBytesNeeded == 4 * 3 + 20 * 4, "loaded whole for its range")
      assert(read(first, 2, 3) == 2 && cache.indexBytesRead == length, "the next range from the heap")
      cache.remove(PartitionedFileIndexCache.key(f.path)) // dropped
      assert(read(first, 1, 2) == 2 && cache.indexBytesRead == length + 4 * 2 + 20 * 2, "then by range alone")
      assert(cache.numEntries == 0, "not loaded a second time")
      val later = PartitionedFile.restore(f.path, 3, None, f.numBuffersTotal, f.size, cache, mayLoadIndex = false)
      assert(read(later, 0, 3) == 6 && cache.numEntries == 0, "a file rebuilt again never loads it")
      assert(cache.indexBytesNeeded == (4 * 3 + 20 * 4) + (4 * 2 + 20 * 2) * 2 + (4 * 4 + 20 * 6))
      assert(cache.indexBytesRead == length + (4 * 2 + 20 * 2) + (4 * 4 + 20 * 6))
      f.delete()
    }
  }

  test("readers take their ranges from the index the writer left in the cache, never from the index file") {
    assume(TestingFileHandles.isSupported, "needs /proc/self/fd")
    withTempDir { dir =>
      val cache = new PartitionedFileIndexCache(1 << 20)
      val f = file(dir, "p.data", 4, cache)
      val expected = (0 until 4).map(sp => (f.numBuffers(sp), f.subpartitionSizes(sp)))
      assert(cache.numEntries == 1 && cache.size == f.indexPath.length())
      assert(f.indexPath.delete(), "from now on a read of the index file would fail")
      assert(f.subpartitionSizes.toSeq == expected.map(_._2) && expected.forall(_._1 == 2))
      assert(f.numBuffers(1, 3) == 4)
      val r = PartitionedFileReader.open(f)
      try {
        val range = r.readIndexRange(1, 3, keepIndexOpen = true)
        assert(range.size == 4 && range.count(1) == 2 && range.count(2) == 2)
        assert((0 until 4).map(range.storedLength) == Seq(11, 15, 12, 16))
        assert(openUnder(dir) == 1, "the data file alone: the index was never opened")
      } finally r.release()
      f.delete()
      assert(cache.numEntries == 0, "a deleted file's index goes with it")
    }
  }

  test("a miss reads the whole index once, for every later reader; without a cache each reader reads the file") {
    withTempDir { dir =>
      val cache = new PartitionedFileIndexCache(1 << 20)
      val f = file(dir, "p.data", 3, null) // written without the cache: as if it had dropped the index
      val restored = PartitionedFile.restore(f.path, 3, None, f.numBuffersTotal, f.size, cache)
      assert(restored.numBuffers(0, 3) == 6 && cache.numEntries == 0, "a backlog alone does not load it")
      val r = PartitionedFileReader.open(restored)
      try assert(r.readIndexRange(0, 2, keepIndexOpen = false).size == 4)
      finally r.release()
      assert(cache.numEntries == 1 && cache.counts == (0L, 2L))
      assert(f.indexPath.delete())
      assert(restored.subpartitionSizes.length == 3 && restored.numBuffers(2) == 2)
      assert(cache.counts._1 == 2L, "answered from the heap")
      intercept[java.nio.file.NoSuchFileException](f.numBuffers(0, 3)) // the same file read without the cache
      f.delete()
      restored.delete()
    }
  }
}
