package io.sluice.partition

import java.io.File
import java.util.zip.CRC32C

import scala.collection.immutable.ArraySeq
import scala.collection.mutable.ArrayBuffer

import io.netty.buffer.{ByteBuf, Unpooled}
import io.sluice.buffer.BlockCodec
import io.sluice.memory.NetworkBufferPool
import io.sluice.serialization.{RecordView, SpanningRecordDeserializer}
import io.sluice.writer.OutputFlusher
import org.apache.spark.unsafe.Platform

/** Builders for result partitions in tests, and a reader that turns their buffers back into elements. */
object TestingResultPartitions {

  def pipelined(
      global: NetworkBufferPool,
      numSubpartitions: Int,
      poolMax: Int,
      maxBuffersPerSubpartition: Int = 1 << 20,
      producerId: Long = 0L,
      shuffleId: Int = 0,
      bufferRequestTimeoutMs: Long = 60000L,
      onReleased: PipelinedResultPartition => Unit = _ => (),
      bufferTimeoutMs: Long = -1L,
      idleFlushIntervalMs: Long = -1L,
      flusher: Option[OutputFlusher] = None): PipelinedResultPartition = {
    val pool = global.createBufferPool(1, poolMax, s"pipelined producer $producerId of shuffle $shuffleId")
    new PipelinedResultPartition(ResultPartitionID(shuffleId, producerId), numSubpartitions, pool,
      maxBuffersPerSubpartition, bufferRequestTimeoutMs, onReleased, bufferTimeoutMs, idleFlushIntervalMs, flusher)
  }

  /**
   * A sort-merge blocking partition whose data buffer may take up to `poolMax` buffers, in the layout
   * `hashBased` picks (by default the product's choice).
   */
  def blocking(
      global: NetworkBufferPool,
      dir: File,
      numSubpartitions: Int,
      poolMax: Int,
      codec: Option[BlockCodec] = None,
      producerId: Long = 0L,
      shuffleId: Int = 0,
      cipher: Option[PartitionedFileCipher] = None,
      hashBased: (Int, Int) => Boolean = DataBuffer.hashBased): SortMergeResultPartition = {
    val pool = global.createBufferPool(1, poolMax, s"blocking producer $producerId of shuffle $shuffleId")
    val file = PartitionedFile.create(new File(dir, s"shuffle-$shuffleId-$producerId.data"), numSubpartitions, codec, cipher)
    new SortMergeResultPartition(ResultPartitionID(shuffleId, producerId), numSubpartitions, pool, file, 60000L, hashBased)
  }

  def emit(partition: ResultPartition, subpartition: Int, bytes: Array[Byte]): Unit =
    partition.emitRecord(subpartition, bytes, Platform.BYTE_ARRAY_OFFSET, bytes.length)

  /** Reads everything `view` has now into `reader`; true once the end of the partition was read. */
  def drain(view: ResultSubpartitionView, reader: TestingElementReader, codec: Option[BlockCodec] = None,
      cipher: Option[PartitionedFileCipher] = None): Boolean = {
    var next = view.getNextBuffer()
    while (next != null) {
      if (next.isEndOfPartition) return true
      if (next.buffer != null) reader.feed(next.buffer) else reader.feed(readSpilled(next.spilled, codec, cipher))
      next = view.getNextBuffer()
    }
    false
  }

  /**
   * Every record of a finished blocking partition's subpartitions [start, end), read through one
   * view: readable at once (one notification), up to its end of partition, with nothing after it.
   */
  def readRange(p: SortMergeResultPartition, start: Int, end: Int, codec: Option[BlockCodec] = None): Seq[Array[Byte]] = {
    val reader = new TestingElementReader
    val listener = new TestingAvailabilityListener
    val view = p.createSubpartitionView(start, end, listener)
    if (listener.notifications.get != 1) throw new AssertionError(s"$p: a finished partition is readable at once")
    if (!drain(view, reader, codec)) throw new AssertionError(s"$p: no end of partition in [$start, $end)")
    if (reader.hasPartialRecord) throw new AssertionError(s"$p: a record cut short in [$start, $end)")
    if (view.getNextBuffer() != null) throw new AssertionError(s"$p: a buffer after the end of partition")
    view.releaseAllResources()
    reader.records
  }

  /** A spilled buffer's bytes, checksum-verified, decrypted and decompressed, in a new direct buffer. */
  def readSpilled(s: SpilledBuffer, codec: Option[BlockCodec], cipher: Option[PartitionedFileCipher] = None): ByteBuf = {
    val stored = Unpooled.directBuffer(s.storedLength)
    s.readInto(stored)
    if (s.isEncrypted) {
      cipher.getOrElse(throw new AssertionError(s"$s is encrypted but no cipher was given")).newBufferCipher()
        .decrypt(stored, 0, s.storedLength, s.iv)
    }
    val crc = new CRC32C
    crc.update(stored.nioBuffer())
    if (crc.getValue.toInt != s.crc) { stored.release(); throw new AssertionError(s"checksum mismatch in $s") }
    if (!s.isCompressed) stored
    else {
      val out = Unpooled.directBuffer(s.rawLength)
      codec.getOrElse(throw new AssertionError(s"$s is compressed but no codec was given"))
        .decompress(stored.nioBuffer(), 0, s.storedLength, out.nioBuffer(0, s.rawLength), 0, s.rawLength)
      out.writerIndex(s.rawLength)
      stored.release()
      out
    }
  }
}

/** What tests write into partitions and read back: records with predictable bytes, and latency markers. */
object TestingRecords {
  sealed trait Element
  final case class Rec(bytes: ArraySeq[Byte]) extends Element {
    override def toString: String = s"Rec(${bytes.length} bytes)"
  }
  final case class Marker(createdAtMillis: Long, stage: Int, index: Int) extends Element

  def rec(bytes: Array[Byte]): Rec = Rec(ArraySeq.unsafeWrapArray(bytes))

  def bytes(channel: Int, seq: Int, length: Int): Array[Byte] =
    Array.tabulate(length)(j => (channel * 131 + seq * 31 + j * 7).toByte)

  /** Sizes from 0 to `max`, mostly small, reproducible per (channel, seq). */
  def length(channel: Int, seq: Int, max: Int): Int = {
    val r = new java.util.Random(channel * 1000003L + seq)
    r.nextInt(4) match {
      case 0 => r.nextInt(16)
      case 1 | 2 => r.nextInt(math.max(1, max / 8))
      case _ => r.nextInt(max + 1)
    }
  }

  /** Whether `a` and `b` hold the same records, in the same order. */
  def sameRecords(a: Seq[Array[Byte]], b: Seq[Array[Byte]]): Boolean =
    a.size == b.size && a.zip(b).forall { case (x, y) => java.util.Arrays.equals(x, y) }

  /** The `seq`-th record a test writes to `channel`. */
  def record(channel: Int, seq: Int, max: Int): Array[Byte] = bytes(channel, seq, length(channel, seq, max))
}

/** Turns one channel's buffers back into elements. Feeding a buffer hands it over: it is released. */
final class TestingElementReader {
  import TestingRecords._

  private val deserializer = new SpanningRecordDeserializer
  private val view = new RecordView
  val elements = new ArrayBuffer[Element]()
  var buffers = 0

  def feed(buffer: ByteBuf): Unit =
    try {
      buffers += 1
      deserializer.setNextBuffer(buffer)
      var r = deserializer.readNext(view)
      while (r != SpanningRecordDeserializer.NeedMoreData) {
        if (r == SpanningRecordDeserializer.Record) elements += rec(view.toByteArray)
        else elements += Marker(view.markerCreatedAtMillis, view.markerProducerStage, view.markerProducerIndex)
        r = deserializer.readNext(view)
      }
    } finally buffer.release()

  def hasPartialRecord: Boolean = deserializer.hasPartialRecord

  def records: Seq[Array[Byte]] = elements.collect { case Rec(b) => b.toArray }.toSeq
}

/** Reads a view to its end on the calling thread, waiting for its listener between bursts. */
object TestingViewReader {
  def readToEnd(view: ResultSubpartitionView, listener: TestingAvailabilityListener, reader: TestingElementReader,
      codec: Option[io.sluice.buffer.BlockCodec] = None): Unit = {
    while (!TestingResultPartitions.drain(view, reader, codec)) {
      if (view.isReleased) throw new ProducerFailedException(ResultPartitionID(-1, -1), view.failureCause)
      if (!listener.awaitNotification()) throw new AssertionError(s"no data and no notification from $view")
    }
  }
}

/** A temporary directory standing in for Spark's local dirs; deleted with its contents afterwards. */
object TestingLocalDirs {
  def withTempDir[T](body: File => T): T = {
    val dir = java.nio.file.Files.createTempDirectory("sluice-test").toFile
    try body(dir)
    finally {
      Option(dir.listFiles()).foreach(_.foreach(_.delete()))
      dir.delete()
    }
  }
}
