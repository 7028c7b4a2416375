package io.sluice.serialization

import java.io.File
import java.nio.file.Files

import io.netty.buffer.{ByteBuf, Unpooled}
import io.sluice.NettyLeakDetection
import io.sluice.partition.TestingHeap
import io.sluice.partition.TestingRecords._
import org.scalatest.funsuite.AnyFunSuite

/**
 * Records that span buffers beyond a reader's [[SpanningRecordBudget]]: gathered in a file
 * ([[SpilledRecord]]) and read in place from it, exact to the byte; the file deleted when its input
 * ends or its reader fails; and the heap a reader holds for partial records, measured, staying
 * within the threshold however many inputs are in flight.
 */
class SpilledRecordSuite extends AnyFunSuite with NettyLeakDetection {

  private def withDir[T](body: File => T): T = {
    val dir = Files.createTempDirectory("sluice-spill-test").toFile
    try body(dir)
    finally { Option(dir.listFiles()).foreach(_.foreach(_.delete())); dir.delete() }
  }

  private def budget(dir: File, threshold: Long): SpanningRecordBudget = {
    var n = 0
    new SpanningRecordBudget(threshold, () => { n += 1; new File(dir, s"record-$n.spill") })
  }

  private def frames(records: Seq[Array[Byte]]): Array[Byte] = {
    val out = new java.io.ByteArrayOutputStream()
    val data = new java.io.DataOutputStream(out)
    records.foreach { r => data.writeInt(r.length); data.write(r) }
    out.toByteArray
  }

  private def direct(bytes: Array[Byte], from: Int, until: Int): ByteBuf = {
    val b = Unpooled.directBuffer(math.max(1, until - from))
    b.writeBytes(bytes, from, until - from)
    b
  }

  /** Feeds `d` the bytes [from, until) as one buffer; returns the records completed, copied out. */
  private def feed(d: SpanningRecordDeserializer, stream: Array[Byte], from: Int, until: Int): Seq[Array[Byte]] = {
    val b = direct(stream, from, until)
    val view = new RecordView
    val out = Seq.newBuilder[Array[Byte]]
    try {
      d.setNextBuffer(b)
      while (d.readNext(view) == SpanningRecordDeserializer.Record) out += view.toByteArray
    } finally b.release()
    out.result()
  }

  test("a record above the threshold is gathered in a file and read in place from it; the file goes with the input") {
    withDir { dir =>
      val shared = budget(dir, 1000)
      val d = new SpanningRecordDeserializer(shared)
      val records = Seq(bytes(1, 0, 300), bytes(1, 1, 5000), bytes(1, 2, 200), bytes(1, 3, 4000))
      val stream = frames(records)
      val view = new RecordView
      var read = Seq.empty[Array[Byte]]
      var sawFile = false
      stream.indices.by(700).foreach { from =>
        val b = direct(stream, from, math.min(stream.length, from + 700))
        d.setNextBuffer(b)
        var r = d.readNext(view)
        while (r == SpanningRecordDeserializer.Record) {
          if (view.length > 1000) {
            assert(view.base == null && d.isSpilling, "read in place from the mapped file, not from the heap")
            assert(d.spillFile.exists() && d.spillFile.getParentFile == dir)
            sawFile = true
          }
          read :+= view.toByteArray
          r = d.readNext(view)
        }
        b.release()
      }
      assert(sawFile)
      assert(sameRecords(read, records), "every byte as written")
      assert(shared.heldBytes <= 1000 && d.spanningCapacity <= 1000,
        "only records within the threshold were gathered in the heap")
      assert(dir.list().length == 1, "one file, reused for the second spilled record")
      d.clear()
      assert(dir.list().isEmpty, "deleted when the input ended")
      d.release()
      assert(shared.heldBytes == 0)
    }
  }

  test("records that would take a reader's arrays beyond the threshold together are gathered on disk") {
    withDir { dir =>
      val shared = budget(dir, 1000)
      val ds = Seq.fill(3)(new SpanningRecordDeserializer(shared))
      val records = Seq(bytes(2, 0, 400), bytes(3, 0, 400), bytes(4, 0, 400))
      val streams = records.map(r => frames(Seq(r)))
      // The first half of each record, one input after the other: three partial records at once.
      ds.zip(streams).foreach { case (d, s) => assert(feed(d, s, 0, 200).isEmpty) }
      assert(ds.map(_.isSpilling) == Seq(false, false, true), "the third does not fit beside the first two")
      assert(shared.heldBytes == 800 && dir.list().length == 1)
      val read = ds.zip(streams).flatMap { case (d, s) => feed(d, s, 200, s.length) }
      assert(sameRecords(read, records))
      ds.foreach(_.release())
      assert(shared.heldBytes == 0 && dir.list().isEmpty)
    }
  }

  test("a reader that fails inside a spilled record deletes its file (release) and gives its budget back") {
    withDir { dir =>
      val shared = budget(dir, 100)
      val d = new SpanningRecordDeserializer(shared)
      val stream = frames(Seq(bytes(5, 0, 50), bytes(5, 1, 10000)))
      assert(feed(d, stream, 0, 30).isEmpty) // the first record is gathered in the heap
      assert(feed(d, stream, 30, 3000).size == 1)
      assert(d.isSpilling && d.hasPartialRecord && dir.list().length == 1)
      d.release()
      assert(dir.list().isEmpty && shared.heldBytes == 0 && !d.hasPartialRecord)
    }
  }

  test("a byte stream cut into pieces of any size, records below, at and above the threshold, reads back the same") {
    withDir { dir =>
      val records = Seq(bytes(6, 0, 0), bytes(6, 1, 64), bytes(6, 2, 65), bytes(6, 3, 3), bytes(6, 4, 700), bytes(6, 5, 64))
      val stream = frames(records)
      for (piece <- Seq(1, 2, 3, 5, 63, 64, 65, 200, stream.length)) {
        val d = new SpanningRecordDeserializer(budget(dir, 64))
        val read = stream.indices.by(piece).flatMap(from => feed(d, stream, from, math.min(stream.length, from + piece)))
        assert(sameRecords(read, records), s"pieces of $piece bytes")
        assert(!d.hasPartialRecord)
        d.release()
        assert(dir.list().isEmpty)
      }
    }
  }

  test("measured: 12 inputs each inside a record above the threshold, or each inside one of half the threshold, hold " +
    "at most 2 x the threshold of heap for their partial records; without a budget they hold the 12 records") {
    val threshold = 256 << 10
    def partialHeap(ds: Seq[SpanningRecordDeserializer]): Long = TestingHeap.reachableBytes(ds.toArray,
      {
        case _: ByteBuf | _: SpanningRecordBudget | _: java.nio.channels.Channel | _: java.nio.Buffer | _: File => true
        case _ => false
      })
    withDir { dir =>
      /** 12 inputs, one record of `size` each, read round-robin in 32 KiB buffers as a gate hands them out. */
      def peakHeap(size: Int, make: () => SpanningRecordDeserializer): Long = {
        val ds = Seq.fill(12)(make())
        val records = (0 until 12).map(i => bytes(i, 0, size))
        val streams = records.map(r => frames(Seq(r)))
        val read = Array.fill(12)(Seq.empty[Array[Byte]])
        var peak = 0L
        streams.head.indices.by(32 << 10).foreach { from =>
          ds.indices.foreach { i =>
            read(i) ++= feed(ds(i), streams(i), from, math.min(streams(i).length, from + (32 << 10)))
            peak = math.max(peak, partialHeap(ds))
          }
        }
        ds.indices.foreach(i => assert(sameRecords(read(i), Seq(records(i))), s"input $i"))
        ds.foreach(_.release())
        assert(dir.list().isEmpty, "every spill file deleted")
        peak
      }
      def sharedBudget(): () => SpanningRecordDeserializer = {
        val shared = budget(dir, threshold)
        () => new SpanningRecordDeserializer(shared)
      }
      val (above, half) = (4 * threshold, threshold / 2)
      val aboveHeap = peakHeap(above, sharedBudget())
      val halfHeap = peakHeap(half, sharedBudget())
      val aboveUnbounded = peakHeap(above, () => new SpanningRecordDeserializer())
      val halfUnbounded = peakHeap(half, () => new SpanningRecordDeserializer())
      info(s"peak heap for partial records of 12 inputs at a threshold of ${threshold >> 10} KiB: records of " +
        s"${above >> 10} KiB $aboveHeap bytes (without a budget $aboveUnbounded), of ${half >> 10} KiB $halfHeap bytes " +
        s"(without $halfUnbounded)")
      assert(aboveHeap <= 2L * threshold + (64 << 10), s"$aboveHeap")
      assert(halfHeap <= 2L * threshold + (64 << 10), s"$halfHeap")
      assert(aboveUnbounded >= 12L * above && halfUnbounded >= 12L * half,
        "the measure sees the records: without a budget every input gathers its record in the heap")
    }
  }

  test("JVM level, 64 MiB heap: one reducer reads a 6 MiB record from each of 12 executors at once, byte-exact, its " +
    "partial records within 2 x a 1 MiB threshold; without a budget the same read runs out of heap") {
    val tmp = Files.createTempDirectory("sluice-big-records-jvm").toFile
    def child(threshold: String): (Int, String) = {
      val javaBin = new File(System.getProperty("java.home"), "bin/java").getPath
      val cmd = Seq(javaBin) ++ TestingBigRecords.childJvmArgs("64m") ++ Seq(s"-Djava.io.tmpdir=$tmp",
        "-cp", System.getProperty("java.class.path"), "io.sluice.serialization.TestingBigRecords", threshold,
        (6 << 20).toString, "12")
      val p = new ProcessBuilder(cmd: _*).redirectErrorStream(true).start()
      val out = new java.io.ByteArrayOutputStream()
      val pump = new Thread(() => p.getInputStream.transferTo(out))
      pump.setDaemon(true)
      pump.start()
      if (!p.waitFor(300, java.util.concurrent.TimeUnit.SECONDS)) {
        p.destroyForcibly()
        fail(s"the child JVM did not end in 5 minutes: $out")
      }
      pump.join(10000)
      (p.exitValue(), out.toString("UTF-8"))
    }
    def deleteAll(f: File): Unit = {
      Option(f.listFiles()).foreach(_.foreach(deleteAll))
      f.delete()
    }
    try {
      val (status, out) = child((1 << 20).toString)
      assert(status == 0, out)
      val result = "RESULT (.*)".r.findFirstMatchIn(out).map(_.group(1)).getOrElse(fail(out))
      val values = result.split(' ').map { kv =>
        val Array(k, v) = kv.split('='); k -> v.toLong
      }.toMap
      info(s"12 executors x 6 MiB records, threshold 1 MiB, -Xmx64m: $result")
      assert(values("records") == 24, "every record of every executor, the big one and the small one after it")
      assert(values("peakPartialHeap") <= 2L * (1 << 20) + (64 << 10), result)
      assert(values("peakSpillFiles") >= 2, "the big records were gathered on disk, several at once")
      assert(values("spillFilesLeft") == 0, "and their files deleted")
      val (unbounded, unboundedOut) = child("none")
      assert(unbounded != 0 && unboundedOut.contains("OutOfMemoryError"),
        s"without a budget 12 x 6 MiB of partial records should not fit 64 MiB of heap: $unboundedOut")
    } finally deleteAll(tmp)
  }
}
