package io.sluice.partition

import java.io.{IOException, RandomAccessFile}
import java.nio.channels.ClosedByInterruptException
import java.nio.file.Files
import java.util.concurrent.{CountDownLatch, TimeUnit}
import java.util.zip.CRC32C

import scala.collection.mutable.ArrayBuffer

import io.netty.buffer.{ByteBufUtil, Unpooled}
import io.sluice.NettyLeakDetection
import io.sluice.TestingThreads._
import io.sluice.buffer.BlockCodec
import io.sluice.memory.NetworkBufferPool
import io.sluice.memory.TestingBufferPools._
import io.sluice.partition.TestingFileHandles.openUnder
import io.sluice.partition.TestingLocalDirs._
import io.sluice.partition.TestingRecords._
import io.sluice.partition.TestingResultPartitions.{drain, emit, readRange, readSpilled}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Sort-merge blocking partitions, in each of the two layouts their data buffer takes: spilling
 * region by region, reading any number of times, compression, checksums, per-reader file handles.
 * The product picks the layout from the pool's size ([[DataBufferLayoutSuite]]); here it is fixed,
 * so that every behaviour holds in both, even where the product would not pick it.
 */
abstract class SortMergeResultPartitionBehaviours(hashBasedLayout: Boolean) extends AnyFunSuite with NettyLeakDetection {

  private val Segment = 32 * 1024

  private def partition(global: NetworkBufferPool, dir: java.io.File, numSubpartitions: Int, poolMax: Int,
      codec: Option[BlockCodec] = None, producerId: Long = 0L): SortMergeResultPartition = {
    val p = TestingResultPartitions.blocking(global, dir, numSubpartitions, poolMax, codec, producerId,
      hashBased = (_, _) => hashBasedLayout)
    assert(p.isHashBased == hashBasedLayout)
    p
  }

  /** Writes `bytesPerSubpartition` of records to each subpartition round-robin; returns what was written. */
  private def write(p: ResultPartition, bytesPerSubpartition: Long, maxRecord: Int,
      only: Seq[Int] = Nil, make: (Int, Int) => Array[Byte] = null): IndexedSeq[ArrayBuffer[Array[Byte]]] = {
    val targets = if (only.isEmpty) 0 until p.numSubpartitions else only
    val written = IndexedSeq.fill(p.numSubpartitions)(new ArrayBuffer[Array[Byte]]())
    val sizes = Array.fill(p.numSubpartitions)(0L)
    var seq = 0
    while (targets.exists(sizes(_) < bytesPerSubpartition)) {
      targets.foreach { ch =>
        if (sizes(ch) < bytesPerSubpartition) {
          val r = if (make == null) record(ch, seq, maxRecord) else make(ch, seq)
          emit(p, ch, r)
          written(ch) += r
          sizes(ch) += r.length + 4
        }
      }
      seq += 1
    }
    written
  }

  private def spilledBuffers(p: SortMergeResultPartition): Seq[(Int, SpilledBuffer)] =
    (0 until p.numSubpartitions).flatMap(s => (0 until p.file.numBuffers(s)).map(i => s -> p.file.buffer(s, i)))

  test("a result 20x larger than the partition's pool spills and every record reads back") {
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val p = partition(global, dir, 4, poolMax = 8)
        val written = write(p, 5L * 1024 * 1024 / 4, maxRecord = 20000)
        assert(p.numQueuedBuffers <= 8)
        assert(p.numSpills > 0, "the producer spilled while writing")
        p.finish()
        assert(p.file.size >= 5L * 1024 * 1024, "uncompressed, the file holds every byte")
        assert(global.numberOfPools == 0 && global.numberOfAvailableSegments == 64,
          "a finished blocking partition lives in its file and gave its pool back")
        (0 until 4).foreach(ch => assert(sameRecords(readRange(p, ch, ch + 1), written(ch).toSeq), s"subpartition $ch"))
        assert(p.numRecordsOut.sum == written.map(_.size).sum)
        p.release(null)
      }
    }
  }

  test("the same range read twice, and by several threads at once, returns identical data") {
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val p = partition(global, dir, 3, poolMax = 4)
        val written = write(p, 300 * 1024, maxRecord = 9000)
        p.finish()
        val expected = written.flatten.toSeq
        val first = readRange(p, 0, 3)
        val second = readRange(p, 0, 3)
        assert(sameRecords(first, expected))
        assert(sameRecords(second, first))
        val readers = (0 until 4).map(t => fork(s"reader $t")(readRange(p, 0, 3)))
        readers.foreach(r => assert(sameRecords(r.join(), expected)))
        p.release(null)
      }
    }
  }

  test("a view reads subpartitions [start, end) in order, then one end of partition") {
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val p = partition(global, dir, 4, poolMax = 4)
        intercept[IllegalStateException](p.createSubpartitionView(0, 1, NoOpBufferAvailabilityListener))
        val written = write(p, 100 * 1024, maxRecord = 5000)
        p.finish()
        val view = p.createSubpartitionView(1, 3, NoOpBufferAvailabilityListener)
        val expectedBacklog = p.file.numBuffers(1) + p.file.numBuffers(2)
        assert(view.backlog == expectedBacklog)
        val seen = new ArrayBuffer[Int]()
        val reader = new TestingElementReader
        var next = view.getNextBuffer()
        while (!next.isEndOfPartition) {
          seen += next.subpartition
          assert(next.backlog == expectedBacklog - seen.size)
          reader.feed(readSpilled(next.spilled, None))
          next = view.getNextBuffer()
        }
        assert(next.subpartition == 2)
        assert(seen == seen.sorted && seen.toSet == Set(1, 2))
        assert(sameRecords(reader.records, (written(1) ++ written(2)).toSeq))
        assert(!view.isAvailable(1))
        Seq((2, 2), (-1, 1), (0, 5), (3, 1)).foreach { case (s, e) =>
          intercept[IndexOutOfBoundsException](p.createSubpartitionView(s, e, NoOpBufferAvailabilityListener))
        }
        p.release(null)
      }
    }
  }

  test("subpartition sizes are positive exactly for the subpartitions that got data") {
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val p = partition(global, dir, 4, poolMax = 4)
        write(p, 200 * 1024, maxRecord = 3000, only = Seq(0, 2))
        p.finish()
        val sizes = p.subpartitionSizes
        assert(sizes(0) > 0 && sizes(2) > 0)
        assert(sizes(1) == 0 && sizes(3) == 0)
        assert(sizes.sum == p.file.size)
        assert(readRange(p, 1, 2).isEmpty, "an empty subpartition reads as just its end")
        assert(readRange(p, 3, 4).isEmpty)
        p.release(null)
      }
    }
  }

  test("more subpartitions than pool buffers: their records share the data buffer and all read back") {
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val p = partition(global, dir, 16, poolMax = 4)
        val written = write(p, 40 * 1024, maxRecord = 2000)
        assert(p.numSpills > 0)
        p.finish()
        (0 until 16).foreach(ch => assert(sameRecords(readRange(p, ch, ch + 1), written(ch).toSeq), s"subpartition $ch"))
        p.release(null)
      }
    }
  }

  Seq("lz4", "lzf", "snappy", "zstd").foreach { name =>
    test(s"$name: compressible buffers are stored compressed and round-trip; incompressible ones are stored raw") {
      withNetworkBufferPool(64, Segment) { global =>
        withTempDir { dir =>
          val codec = BlockCodec.forSparkCodec(name, 1)
          val p = partition(global, dir, 2, poolMax = 4, codec = Some(codec))
          val random = new java.util.Random(11)
          // Subpartition 0 gets patterned bytes, subpartition 1 random ones.
          val written = write(p, 400 * 1024, maxRecord = 8000,
            make = (ch, seq) =>
              if (ch == 0) record(ch, seq, 8000)
              else { val a = new Array[Byte](TestingRecords.length(ch, seq, 8000)); random.nextBytes(a); a })
          p.finish()
          val buffers = spilledBuffers(p)
          val (patterned, noise) = buffers.partition(_._1 == 0)
          assert(patterned.nonEmpty && noise.nonEmpty)
          assert(patterned.forall { case (_, b) => b.isCompressed && b.storedLength < b.rawLength }, patterned)
          assert(noise.forall { case (_, b) => !b.isCompressed }, "incompressible buffers are stored as they are")
          assert(p.subpartitionSizes(0) * 4 < p.subpartitionSizes(1))
          (0 until 2).foreach(ch => assert(sameRecords(readRange(p, ch, ch + 1, Some(codec)), written(ch).toSeq)))
          p.release(null)
        }
      }
    }
  }

  test("each stored buffer's CRC32C matches its bytes, and a flipped byte in the file is detected") {
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val p = partition(global, dir, 2, poolMax = 4, codec = Some(BlockCodec.forSparkCodec("lz4", 1)))
        write(p, 200 * 1024, maxRecord = 6000)
        p.finish()
        def crcMismatches: Seq[SpilledBuffer] = spilledBuffers(p).map(_._2).filter { b =>
          val data = Unpooled.directBuffer(b.storedLength)
          try {
            b.readInto(data)
            val crc = new CRC32C
            crc.update(data.nioBuffer())
            crc.getValue.toInt != b.crc
          } finally data.release()
        }
        assert(crcMismatches.isEmpty)
        val victim = p.file.buffer(1, 2)
        val raf = new RandomAccessFile(p.file.path, "rw")
        try {
          raf.seek(victim.offset + victim.storedLength / 2)
          val b = raf.read()
          raf.seek(victim.offset + victim.storedLength / 2)
          raf.write(b ^ 0x10)
        } finally raf.close()
        val bad = crcMismatches
        assert(bad.size == 1 && bad.head.offset == victim.offset)
        p.release(null)
      }
    }
  }

  test("release deletes the file; views see the release") {
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val p = partition(global, dir, 2, poolMax = 4)
        write(p, 100 * 1024, maxRecord = 3000)
        p.finish()
        val view = p.createSubpartitionView(0, 2, NoOpBufferAvailabilityListener)
        val first = view.getNextBuffer()
        assert(first.spilled != null)
        assert(p.file.path.exists() && p.file.indexPath.exists())
        p.release(new RuntimeException("shuffle unregistered"))
        assert(!p.file.path.exists() && !p.file.indexPath.exists(), "deleted with its index")
        assert(view.isReleased && view.isAvailable(1) && view.getNextBuffer() == null)
        assert(view.failureCause.getMessage == "shuffle unregistered")
        val target = Unpooled.directBuffer(first.spilled.storedLength)
        try intercept[java.io.IOException](first.spilled.readInto(target))
        finally target.release()
        intercept[ProducerFailedException](p.createSubpartitionView(0, 1, NoOpBufferAvailabilityListener))
        p.release(null)
      }
    }
  }

  test("a producer failure before finish deletes the file and gives every buffer back") {
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val p = partition(global, dir, 3, poolMax = 4)
        write(p, 300 * 1024, maxRecord = 3000)
        assert(p.numSpills > 0)
        p.release(new RuntimeException("task killed"))
        p.closeBufferBuilders()
        assert(!p.file.path.exists())
        intercept[ProducerFailedException](emit(p, 0, bytes(0, 0, 1)))
      }
    }
  }

  test("the index file goes with its data file on every path: shuffle removal, executor stop, failed finish") {
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val manager = new ResultPartitionManager()
        val ps = (0 until 4).map(i =>
          TestingResultPartitions.blocking(global, dir, 3, poolMax = 4, producerId = i,
            shuffleId = i % 2, hashBased = (_, _) => hashBasedLayout))
        ps.foreach { p => write(p, 50 * 1024, maxRecord = 3000); p.finish(); manager.registerResultPartition(p) }
        assert(ps.forall(p => p.file.path.exists() && p.file.indexPath.exists()))
        assert(dir.listFiles().length == 8, "each data file with its index beside it")
        manager.releasePartitionsOfShuffle(1)
        assert(dir.listFiles().map(_.getName).sorted.toSeq ==
          Seq(0, 2).flatMap(i => Seq(ps(i).file.path.getName, ps(i).file.indexPath.getName)).sorted)
        manager.shutdown()
        assert(dir.listFiles().isEmpty, "the executor's stop deleted every data and index file")

        // The index cannot be written (a file is in its way): finish fails, the release deletes the data.
        val failing = partition(global, dir, 2, poolMax = 4, producerId = 9)
        write(failing, 50 * 1024, maxRecord = 3000)
        assert(failing.file.indexPath.createNewFile())
        intercept[java.io.IOException](failing.finish())
        failing.release(new RuntimeException("task failed"))
        failing.closeBufferBuilders()
        assert(dir.listFiles().isEmpty, "the failed partition's data and index are gone")
      }
    }
  }

  test("segments larger than the spill staging buffer (2 MB) are spilled and read back") {
    withNetworkBufferPool(8, 2 << 20) { global =>
      withTempDir { dir =>
        Seq(None, Some(BlockCodec.forSparkCodec("lz4", 1))).foreach { codec =>
          val p = partition(global, dir, 1, poolMax = 3, codec = codec, producerId = codec.size.toLong)
          val written = write(p, 12L << 20, maxRecord = 300000)
          assert(p.numSpills > 0)
          p.finish()
          assert(sameRecords(readRange(p, 0, 1, codec), written(0).toSeq))
          p.release(null)
        }
      }
    }
  }

  // ---- cost flat in the number of subpartitions -------------------------------------------

  /** Emits `n` small records to subpartitions chosen by `target`; returns them per subpartition and their frame bytes. */
  private def writeSmall(p: ResultPartition, n: Int, target: java.util.Random => Int,
      seed: Long): (IndexedSeq[ArrayBuffer[Array[Byte]]], Array[Long]) = {
    val written = IndexedSeq.fill(p.numSubpartitions)(new ArrayBuffer[Array[Byte]]())
    val frameBytes = new Array[Long](p.numSubpartitions)
    val random = new java.util.Random(seed)
    var i = 0
    while (i < n) {
      val ch = target(random)
      val r = bytes(ch, i, random.nextInt(60))
      emit(p, ch, r)
      written(ch) += r
      frameBytes(ch) += 4 + r.length
      i += 1
    }
    (written, frameBytes)
  }

  // Sort-based only: the hash-based layout would spill every time a 25th subpartition got a record.
  if (!hashBasedLayout) test(
    "4000 subpartitions through a 24-buffer sort buffer: records read back in order, at most one part-filled buffer per subpartition and region") {
    withNetworkBufferPool(32, Segment) { global =>
      withTempDir { dir =>
        val n = 4000
        val p = partition(global, dir, n, poolMax = 24)
        val (written, frameBytes) = writeSmall(p, 200000, _.nextInt(n), seed = 1)
        assert(p.numQueuedBuffers <= 24, "the sort buffer stays within its pool")
        p.finish()
        val spills = p.numSpills
        assert(spills > 1 && spills < 40, s"$spills regions for ${frameBytes.sum} bytes through a 768 KiB sort buffer")
        assert(p.file.size == frameBytes.sum, "uncompressed, the file holds exactly the frames")
        assert(p.numBuffersOut.sum == p.file.numBuffersTotal)
        (0 until n).foreach { s =>
          val buffers = (0 until p.file.numBuffers(s)).map(p.file.buffer(s, _))
          assert(buffers.forall(_.storedLength <= Segment))
          // Each region ends the subpartition's data with one part-filled buffer at most.
          assert(buffers.count(_.storedLength < Segment) <= spills, s"subpartition $s")
          assert(buffers.size <= frameBytes(s) / Segment + spills, s"subpartition $s")
        }
        assert(p.file.numBuffersTotal <= frameBytes.sum / Segment + spills.toLong * n)
        info(s"200000 records, ${frameBytes.sum} bytes: $spills regions, ${p.file.numBuffersTotal} buffers")
        (0 until n).foreach(ch => assert(sameRecords(readRange(p, ch, ch + 1), written(ch).toSeq), s"subpartition $ch"))
        assert(sameRecords(readRange(p, 0, n), written.flatten.toSeq), "one view over every subpartition")
        p.release(null)
      }
    }
  }

  test("records for a few of 4000 subpartitions are written as full buffers: the untouched ones cost nothing") {
    withNetworkBufferPool(32, Segment) { global =>
      withTempDir { dir =>
        val hot = Seq(7, 1000, 2500, 3999)
        val p = partition(global, dir, 4000, poolMax = 8)
        val (written, frameBytes) = writeSmall(p, 100000, r => hot(r.nextInt(hot.size)), seed = 2)
        p.finish()
        val spills = p.numSpills
        assert(spills > 5)
        // Bytes / segment, plus one part-filled buffer per touched subpartition and region.
        assert(p.file.numBuffersTotal <= frameBytes.sum / Segment + 1 + spills * hot.size,
          s"${p.file.numBuffersTotal} buffers for ${frameBytes.sum} bytes in $spills regions")
        assert((0 until 4000).filterNot(hot.contains).forall(p.file.numBuffers(_) == 0))
        info(s"100000 records, ${frameBytes.sum} bytes: $spills regions, ${p.file.numBuffersTotal} buffers")
        hot.foreach(ch => assert(sameRecords(readRange(p, ch, ch + 1), written(ch).toSeq), s"subpartition $ch"))
        p.release(null)
      }
    }
  }

  Seq(None, Some("lz4")).foreach { codecName =>
    test(s"records larger than the whole data buffer stream through in order with small ones (codec $codecName)") {
      withNetworkBufferPool(16, Segment) { global =>
        withTempDir { dir =>
          val codec = codecName.map(BlockCodec.forSparkCodec(_, 1))
          val p = partition(global, dir, 3, poolMax = 4, codec = codec)
          val written = IndexedSeq.fill(3)(new ArrayBuffer[Array[Byte]]())
          (0 until 60).foreach { i =>
            val ch = i % 3
            val r = if (i % 7 == 3) bytes(ch, i, (1 << 20) + i) else record(ch, i, 3000)
            emit(p, ch, r)
            written(ch) += r
          }
          assert(p.numQueuedBuffers <= 4)
          p.finish()
          assert(spilledBuffers(p).forall(_._2.storedLength <= Segment), "no stored buffer exceeds a segment")
          (0 until 3).foreach(ch => assert(sameRecords(readRange(p, ch, ch + 1, codec), written(ch).toSeq), s"subpartition $ch"))
          p.release(null)
        }
      }
    }
  }

  test("latency markers reach every subpartition behind the records written before them") {
    withNetworkBufferPool(16, Segment) { global =>
      withTempDir { dir =>
        val p = partition(global, dir, 50, poolMax = 2)
        (0 until 50).foreach(ch => emit(p, ch, bytes(ch, 0, 100 + ch)))
        p.broadcastLatencyMarker(1234L, 5, 6)
        (0 until 50).foreach(ch => emit(p, ch, bytes(ch, 1, 7)))
        p.finish()
        (0 until 50).foreach { ch =>
          val reader = new TestingElementReader
          assert(drain(p.createSubpartitionView(ch, ch + 1, NoOpBufferAvailabilityListener), reader))
          assert(reader.elements == Seq(rec(bytes(ch, 0, 100 + ch)), Marker(1234L, 5, 6), rec(bytes(ch, 1, 7))))
        }
        assert(p.numBytesOut.sum == (0 until 50).map(ch => 4 + 100 + ch + 20 + 4 + 7).sum)
        p.release(null)
      }
    }
  }

  test("with no buffer free in the executor the producer waits for its first one, counted as backpressure") {
    withNetworkBufferPool(4, Segment) { global =>
      withTempDir { dir =>
        val other = global.createBufferPool(0, 4, "another task's pool")
        val held = (0 until 4).map(_ => other.requestBuffer())
        assert(held.forall(_ != null))
        val p = partition(global, dir, 2, poolMax = 4)
        val producer = fork("producer without memory")(emit(p, 1, bytes(1, 0, 500)))
        producer.awaitWaiting()
        assert(!producer.isDone)
        held.head.release() // the other pool now holds more than its share: the segment goes to the producer
        producer.join()
        assert(p.backPressuredTimeNanos.sum > 0)
        held.tail.foreach(_.release())
        other.lazyDestroy()
        p.finish()
        assert(sameRecords(readRange(p, 1, 2), Seq(bytes(1, 0, 500))))
        p.release(null)
      }
    }
  }

  // ---- file handles -----------------------------------------------------------------------

  test("finished partitions hold no open file; a view holds one handle while reading and none after its end") {
    assume(TestingFileHandles.isSupported, "needs /proc/self/fd")
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val partitions = (0 until 12).map(i => partition(global, dir, 3, poolMax = 2, producerId = i))
        partitions.foreach(p => write(p, 20 * 1024, maxRecord = 2000))
        assert(openUnder(dir) == partitions.size, "a writer holds its file open until it finishes")
        partitions.foreach(_.finish())
        assert(openUnder(dir) == 0, "finished partitions hold no file handle")

        val p = partitions.head
        val view = p.createSubpartitionView(0, 3, NoOpBufferAvailabilityListener)
        assert(openUnder(dir) == 0, "a view opens the file on its first read")
        val reader = new TestingElementReader
        var next = view.getNextBuffer()
        assert(openUnder(dir) == 1)
        while (!next.isEndOfPartition) {
          reader.feed(readSpilled(next.spilled, None))
          next = view.getNextBuffer()
        }
        assert(openUnder(dir) == 0, "a view that read its end closed its handle")

        val abandoned = p.createSubpartitionView(1, 2, NoOpBufferAvailabilityListener)
        assert(abandoned.getNextBuffer().spilled != null && openUnder(dir) == 1)
        abandoned.releaseAllResources()
        assert(openUnder(dir) == 0, "a released view closed its handle")

        val lingering = partitions(1).createSubpartitionView(0, 1, NoOpBufferAvailabilityListener)
        assert(lingering.getNextBuffer().spilled != null && openUnder(dir) == 1)
        partitions.foreach(_.release(null))
        assert(lingering.getNextBuffer() == null && lingering.isReleased)
        assert(openUnder(dir) == 0, "a view that saw its partition released closed its handle")
        assert(dir.listFiles().isEmpty, "released partitions deleted their files")
      }
    }
  }

  test("the server's views share one kept handle per file: opened once for many readers, bounded, closed when idle or deleted") {
    assume(TestingFileHandles.isSupported, "needs /proc/self/fd")
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val cache = new PartitionedFileReaderCache(2)
        val ps = (0 until 3).map(i => partition(global, dir, 3, poolMax = 2, producerId = i))
        ps.foreach { p => write(p, 20 * 1024, maxRecord = 2000); p.finish() }
        val expected = ps.map(p => readRange(p, 0, 3))
        def readThroughCache(p: SortMergeResultPartition, start: Int, end: Int): Seq[Array[Byte]] = {
          val view = p.createSubpartitionView(start, end, NoOpBufferAvailabilityListener, Some(cache))
          val reader = new TestingElementReader
          drain(view, reader)
          reader.records
        }
        assert(openUnder(dir) == 0)

        // Three readers of one file, one after another: one handle, kept between them.
        val first = cache.acquire(ps(0).file)
        assert(cache.acquire(ps(0).file) eq first, "a kept reader is handed out again")
        first.release(); first.release()
        for (_ <- 0 until 3) assert(sameRecords(readThroughCache(ps(0), 0, 3), expected(0)))
        // A kept reader holds two handles once a view read through it: the data's and the index's.
        assert(cache.size == 1 && openUnder(dir) == 2, "one reader kept for the readers to come")
        assert(cache.numDescriptors == 2, "the kept file's descriptors are counted")
        assert(cache.acquire(ps(0).file) eq first, "still the handle the first reader opened")
        first.release()

        // Full: a further file is opened for its reader alone, and nothing kept is dropped for it
        // (reducers read the files in the same order; dropping the oldest would miss every time).
        assert(sameRecords(readThroughCache(ps(1), 0, 3), expected(1)))
        assert(cache.size == 2 && openUnder(dir) == 4)
        assert(sameRecords(readThroughCache(ps(2), 0, 3), expected(2)))
        assert(cache.size == 2 && openUnder(dir) == 4, "the file beyond the capacity was closed after its reader")
        assert(cache.numDescriptors == 4)
        assert(cache.acquire(ps(0).file) eq first, "the kept files stay")
        first.release()

        // Idle files are closed by the executor's sweep, recently read ones stay; a view still
        // reading a dropped file keeps its handle open until it is done.
        val lingering = ps(0).createSubpartitionView(1, 2, NoOpBufferAvailabilityListener, Some(cache))
        val held = lingering.getNextBuffer()
        assert(held.spilled != null)
        cache.closeIdle(System.nanoTime() - 60L * 1000000000L)
        assert(cache.size == 2 && openUnder(dir) == 4, "read within the last minute: kept")
        cache.closeIdle(System.nanoTime())
        assert(cache.size == 0 && openUnder(dir) == 2, "no reader since: dropped, but the lingering view holds one")
        val rest = new TestingElementReader
        rest.feed(readSpilled(held.spilled, None))
        drain(lingering, rest)
        assert(openUnder(dir) == 0, "closed once its last reader was done")
        assert(sameRecords(readThroughCache(ps(2), 0, 3), expected(2)), "a closed file is opened again when read")
        assert(cache.size == 1 && openUnder(dir) == 2, "and kept again, there being room")

        // Deleting a file closes its kept handle at once: no handle holds a deleted file's space.
        ps(2).release(null)
        assert(cache.size == 0 && openUnder(dir) == 0)
        ps.foreach(_.release(null))
        assert(cache.size == 0 && openUnder(dir) == 0 && dir.listFiles().isEmpty && cache.numDescriptors == 0)
      }
    }
  }

  test("the kept files' descriptors, two each, are bounded by a quarter of the process's open-file limit") {
    assert(PartitionedFileReaderCache.capacityFor(Int.MaxValue, 1024) == 128, "256 descriptors: 128 files of two")
    assert(PartitionedFileReaderCache.capacityFor(100, 1024) == 100)
    java.lang.management.ManagementFactory.getOperatingSystemMXBean match {
      case unix: com.sun.management.UnixOperatingSystemMXBean =>
        val limit = unix.getMaxFileDescriptorCount
        assert(limit >= 64, s"open-file limit $limit")
        assert(PartitionedFileReaderCache.effectiveCapacity(Int.MaxValue) == limit / 4 / 2)
        assert(PartitionedFileReaderCache.effectiveCapacity(16) == 16)
      case other => cancel(s"no open-file limit to read from $other")
    }
  }

  test("a cache of capacity 0 keeps nothing: each reader opens and closes its own handle") {
    assume(TestingFileHandles.isSupported, "needs /proc/self/fd")
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val cache = new PartitionedFileReaderCache(0)
        val p = partition(global, dir, 1, poolMax = 2)
        write(p, 20 * 1024, maxRecord = 2000)
        p.finish()
        val view = p.createSubpartitionView(0, 1, NoOpBufferAvailabilityListener, Some(cache))
        val reader = new TestingElementReader
        drain(view, reader)
        assert(sameRecords(reader.records, readRange(p, 0, 1)))
        assert(cache.size == 0 && openUnder(dir) == 0)
        p.release(null)
      }
    }
  }

  test("a buffer taken from a view reads after the view ended, through a handle of its own, closed again") {
    assume(TestingFileHandles.isSupported, "needs /proc/self/fd")
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val p = partition(global, dir, 1, poolMax = 2)
        write(p, 100 * 1024, maxRecord = 2000)
        p.finish()
        val view = p.createSubpartitionView(0, 1, NoOpBufferAvailabilityListener)
        val first = view.getNextBuffer().spilled
        val whileOpen = Unpooled.directBuffer(first.storedLength)
        val afterEnd = Unpooled.directBuffer(first.storedLength)
        try {
          first.readInto(whileOpen) // through the view's handle
          assert(openUnder(dir) == 1)
          while (!view.getNextBuffer().isEndOfPartition) ()
          assert(openUnder(dir) == 0, "the view's handle closes with its end")
          first.readInto(afterEnd)
          assert(ByteBufUtil.getBytes(afterEnd).sameElements(ByteBufUtil.getBytes(whileOpen)))
        } finally { whileOpen.release(); afterEnd.release() }
        assert(openUnder(dir) == 0)
        p.release(null)
      }
    }
  }

  test("an interrupted reader fails alone: a reader at the same time and one after it read everything") {
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val p = partition(global, dir, 2, poolMax = 8)
        val written = write(p, 3L << 20, maxRecord = 20000)
        p.finish()
        val expected = written.flatten.toSeq
        val victimReading = new CountDownLatch(1)
        val victim = fork("reader to be interrupted") {
          while (true) { // the local read path, over and over, until the interrupt stops it
            val view = p.createSubpartitionView(0, 2, NoOpBufferAvailabilityListener)
            try {
              var next = view.getNextBuffer()
              while (!next.isEndOfPartition) {
                val target = Unpooled.directBuffer(next.spilled.storedLength)
                try next.spilled.readInto(target)
                finally target.release()
                victimReading.countDown()
                next = view.getNextBuffer()
              }
            } finally view.releaseAllResources()
          }
        }
        val halfRead = new CountDownLatch(1)
        val victimDone = new CountDownLatch(1)
        val concurrent = fork("reader at the same time") {
          val view = p.createSubpartitionView(0, 2, NoOpBufferAvailabilityListener)
          val reader = new TestingElementReader
          var next = view.getNextBuffer()
          var n = 0
          while (!next.isEndOfPartition) {
            reader.feed(readSpilled(next.spilled, None))
            n += 1
            if (n == 10) { halfRead.countDown(); assert(victimDone.await(60, TimeUnit.SECONDS)) }
            next = view.getNextBuffer()
          }
          reader.records
        }
        assert(victimReading.await(60, TimeUnit.SECONDS) && halfRead.await(60, TimeUnit.SECONDS))
        victim.thread.interrupt()
        val failure = victim.failure()
        assert(failure.isInstanceOf[ClosedByInterruptException], failure)
        victimDone.countDown()
        assert(sameRecords(concurrent.join(), expected), "the reader with its file open at the interrupt read on")
        assert(sameRecords(readRange(p, 0, 2), expected), "a reader after the interrupt")
        if (TestingFileHandles.isSupported) assert(openUnder(dir) == 0)
        p.release(null)
      }
    }
  }

  test("a view whose file vanished fails on its own read; a view with the file open reads on") {
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val p = partition(global, dir, 2, poolMax = 4)
        val written = write(p, 200 * 1024, maxRecord = 5000)
        p.finish()
        val open = p.createSubpartitionView(0, 2, NoOpBufferAvailabilityListener)
        val reader = new TestingElementReader
        val first = open.getNextBuffer()
        Files.delete(p.file.path.toPath) // an operator cleaning the local dirs
        val late = p.createSubpartitionView(0, 2, NoOpBufferAvailabilityListener)
        intercept[IOException](late.getNextBuffer())
        late.releaseAllResources()
        reader.feed(readSpilled(first.spilled, None))
        assert(drain(open, reader))
        assert(sameRecords(reader.records, written.flatten.toSeq))
        p.release(null)
      }
    }
  }
}

class SortBasedResultPartitionSuite extends SortMergeResultPartitionBehaviours(hashBasedLayout = false)

class HashBasedResultPartitionSuite extends SortMergeResultPartitionBehaviours(hashBasedLayout = true)
