package io.sluice.partition

import java.io.RandomAccessFile
import java.util.zip.CRC32C

import scala.collection.mutable.ArrayBuffer

import io.netty.buffer.Unpooled
import io.sluice.TestingThreads._
import io.sluice.buffer.BlockCodec
import io.sluice.memory.TestingBufferPools._
import io.sluice.partition.TestingLocalDirs._
import io.sluice.partition.TestingRecords._
import io.sluice.partition.TestingResultPartitions._
import org.scalatest.funsuite.AnyFunSuite

/** Blocking partitions: spilling through a small pool, reading any number of times, compression, checksums. */
class BlockingResultPartitionSuite extends AnyFunSuite {

  private val Segment = 32 * 1024

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

  private def readRange(p: BlockingResultPartition, start: Int, end: Int, codec: Option[BlockCodec] = None): Seq[Array[Byte]] = {
    val reader = new TestingElementReader
    val listener = new TestingAvailabilityListener
    val view = p.createSubpartitionView(start, end, listener)
    assert(listener.notifications.get == 1, "a finished partition is readable at once")
    assert(drain(view, reader, codec))
    assert(!reader.hasPartialRecord)
    assert(view.getNextBuffer() == null)
    view.releaseAllResources()
    reader.records
  }

  private def sameRecords(a: Seq[Array[Byte]], b: Seq[Array[Byte]]): Boolean =
    a.size == b.size && a.zip(b).forall { case (x, y) => java.util.Arrays.equals(x, y) }

  private def spilledBuffers(p: BlockingResultPartition): Seq[(Int, SpilledBuffer)] =
    (0 until p.numSubpartitions).flatMap(s => (0 until p.file.numBuffers(s)).map(i => s -> p.file.buffer(s, i)))

  test("a result 20x larger than the partition's pool spills and every record reads back") {
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val p = blocking(global, dir, 4, poolMax = 8)
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
        val p = blocking(global, dir, 3, poolMax = 4)
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
        val p = blocking(global, dir, 4, poolMax = 4)
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
        val p = blocking(global, dir, 4, poolMax = 4)
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

  test("more subpartitions than pool buffers: partly written buffers are cut and spilled") {
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val p = blocking(global, dir, 16, poolMax = 4)
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
          val p = blocking(global, dir, 2, poolMax = 4, codec = Some(codec))
          val random = new java.util.Random(11)
          // Subpartition 0 gets patterned bytes, subpartition 1 random ones.
          val written = write(p, 400 * 1024, maxRecord = 8000, make = (ch, seq) =>
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
        val p = blocking(global, dir, 2, poolMax = 4, codec = Some(BlockCodec.forSparkCodec("lz4", 1)))
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
        val p = blocking(global, dir, 2, poolMax = 4)
        write(p, 100 * 1024, maxRecord = 3000)
        p.finish()
        val view = p.createSubpartitionView(0, 2, NoOpBufferAvailabilityListener)
        val first = view.getNextBuffer()
        assert(first.spilled != null)
        assert(p.file.path.exists())
        p.release(new RuntimeException("shuffle unregistered"))
        assert(!p.file.path.exists())
        assert(view.isReleased && view.isAvailable(1) && view.getNextBuffer() == null)
        assert(view.failureCause.getMessage == "shuffle unregistered")
        val target = Unpooled.directBuffer(first.spilled.storedLength)
        try intercept[java.io.IOException](first.spilled.readInto(target)) finally target.release()
        intercept[ProducerFailedException](p.createSubpartitionView(0, 1, NoOpBufferAvailabilityListener))
        p.release(null)
      }
    }
  }

  test("a producer failure before finish deletes the file and gives every buffer back") {
    withNetworkBufferPool(64, Segment) { global =>
      withTempDir { dir =>
        val p = blocking(global, dir, 3, poolMax = 4)
        write(p, 300 * 1024, maxRecord = 3000)
        assert(p.numSpills > 0)
        p.release(new RuntimeException("task killed"))
        p.closeBufferBuilders()
        assert(!p.file.path.exists())
        intercept[ProducerFailedException](emit(p, 0, bytes(0, 0, 1)))
      }
    }
  }

  test("segments larger than the spill staging buffer (2 MB) are spilled and read back") {
    withNetworkBufferPool(8, 2 << 20) { global =>
      withTempDir { dir =>
        Seq(None, Some(BlockCodec.forSparkCodec("lz4", 1))).foreach { codec =>
          val p = blocking(global, dir, 1, poolMax = 3, codec = codec, producerId = codec.size.toLong)
          val written = write(p, 12L << 20, maxRecord = 300000)
          assert(p.numSpills > 0)
          p.finish()
          assert(sameRecords(readRange(p, 0, 1, codec), written(0).toSeq))
          p.release(null)
        }
      }
    }
  }
}
