package io.sluice.serialization

import java.io.File
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import io.netty.buffer.ByteBuf
import io.sluice.config.SluiceOptions
import io.sluice.netty.TestingExecutor
import io.sluice.partition.{ResultPartitionID, TestingHeap}
import io.sluice.partition.consumer.GateInput
import org.apache.spark.unsafe.Platform

/**
 * A JVM of its own (see [[SpilledRecordSuite]]): `channels` executors each write one record of
 * `size` bytes and a small one; a reader gate reads them all at once, round-robin, with one
 * deserializer per input sharing a [[SpanningRecordBudget]] of `threshold` bytes ("none": no
 * budget), checks every byte in place and prints what the partial records held of the heap. Run
 * with a small -Xmx: without a budget the partial records do not fit.
 */
object TestingBigRecords {

  def byteAt(producer: Int, i: Int): Byte = (producer * 131 + i * 7 + (i >>> 13)).toByte

  /** Arguments: threshold bytes or "none", record bytes, channels. Exits 0 after printing the result line. */
  def main(args: Array[String]): Unit = {
    val status =
      try { println(run(args(0), args(1).toInt, args(2).toInt)); 0 }
      catch { case t: Throwable => t.printStackTrace(); 1 }
    System.out.flush()
    System.exit(status)
  }

  private def run(threshold: String, size: Int, channels: Int): String = {
    val settings = Map(SluiceOptions.SegmentSize.key -> "32k", SluiceOptions.MaxFrameLength.key -> "128k")
    val transport = Map("spark.sluice.io.serverThreads" -> "1", "spark.sluice.io.clientThreads" -> "1")
    val producers = (0 until channels).map(i => new TestingExecutor(s"P$i", settings, transport, numSegments = 16))
    val reader = new TestingExecutor("B", settings, transport, numSegments = 64)
    val dir = Files.createTempDirectory("sluice-big-records").toFile
    try {
      val inputs = {
        val record = new Array[Byte](size)
        producers.zipWithIndex.map { case (p, i) =>
          val part = p.blockingPartition(ResultPartitionID(43, i), 1, None, poolSize = 4)
          var j = 0
          while (j < size) { record(j) = byteAt(i, j); j += 1 }
          part.emitRecord(0, record, Platform.BYTE_ARRAY_OFFSET, size)
          part.emitRecord(0, record, Platform.BYTE_ARRAY_OFFSET, 100)
          p.finish(part)
          GateInput(part.partitionId, 0, 1, p.location)
        }
      }
      val budget =
        if (threshold == "none") None
        else Some(new SpanningRecordBudget(threshold.toLong, () => new File(dir, s"record-${java.util.UUID.randomUUID()}")))
      val deserializers = Array.fill(channels)(budget.fold(new SpanningRecordDeserializer())(new SpanningRecordDeserializer(_)))
      val gate = reader.gate("big records", inputs.toIndexedSeq)
      val view = new RecordView
      var n = 0
      var peakHeap = 0L
      var peakFiles = 0
      var next = gate.getNext()
      while (next != null) {
        val d = deserializers(next.input)
        d.setNextBuffer(next.buffer)
        while (d.readNext(view) == SpanningRecordDeserializer.Record) {
          if (view.length != size && view.length != 100) throw new AssertionError(s"a record of ${view.length} bytes")
          var j = 0
          while (j < view.length) {
            if (Platform.getByte(view.base, view.offset + j) != byteAt(next.input, j)) {
              throw new AssertionError(s"a record of ${view.length} bytes of input ${next.input} differs at byte $j")
            }
            j += 1
          }
          n += 1
        }
        next.buffer.release()
        peakHeap = math.max(peakHeap,
          TestingHeap.reachableBytes(deserializers,
            {
              case _: ByteBuf | _: SpanningRecordBudget | _: java.nio.channels.Channel | _: java.nio.Buffer | _: File => true
              case _ => false
            }))
        peakFiles = math.max(peakFiles, dir.list().length)
        next = gate.getNext()
      }
      deserializers.foreach(_.release())
      gate.close()
      s"RESULT records=$n peakPartialHeap=$peakHeap peakSpillFiles=$peakFiles spillFilesLeft=${dir.list().length}"
    } finally {
      (producers :+ reader).foreach(e =>
        try e.shutdown()
        catch { case _: Throwable => () })
      Option(dir.listFiles()).foreach(_.foreach(_.delete()))
      dir.delete()
    }
  }

  /** This JVM's arguments for a child JVM, without its heap, direct memory and leak-detection settings. */
  def childJvmArgs(heap: String): Seq[String] = {
    val own = java.lang.management.ManagementFactory.getRuntimeMXBean.getInputArguments.asScala.toSeq.filterNot { a =>
      a.startsWith("-Xmx") || a.startsWith("-XX:MaxDirectMemorySize") || a.startsWith("-Dio.netty.leakDetection") ||
      a.startsWith("-Dio.netty.customResourceLeakDetector") || a.startsWith("-agentlib") || a.startsWith("-javaagent")
    }
    own ++ Seq(s"-Xmx$heap", "-XX:+ExitOnOutOfMemoryError", "-Dio.netty.leakDetection.level=disabled")
  }
}
