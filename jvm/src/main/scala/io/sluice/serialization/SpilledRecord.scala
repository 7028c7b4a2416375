package io.sluice.serialization

import java.io.{File, IOException}
import java.nio.MappedByteBuffer
import java.nio.channels.FileChannel
import java.nio.file.{Files, StandardOpenOption}

import io.netty.buffer.ByteBuf
import io.netty.util.internal.PlatformDependent

/**
 * A record that spans buffers, gathered in a file instead of the heap (Flink's
 * SpillingAdaptiveSpanningRecordDeserializer spills large records the same way): written as its
 * buffers arrive, straight from their off-heap memory, then mapped read-only so the record is read
 * in place and never copied into the heap. One per [[SpanningRecordDeserializer]] that needs it;
 * the file is reused for its next spilled record and deleted by [[close]]. Task thread only.
 */
final class SpilledRecord(val file: File) {

  private val channel = FileChannel.open(file.toPath, StandardOpenOption.CREATE_NEW, StandardOpenOption.READ,
    StandardOpenOption.WRITE)
  private var written = 0L
  private var mapped: MappedByteBuffer = _

  /** Appends `length` bytes of `buf` from `index` (its memory, not its reader index). */
  def append(buf: ByteBuf, index: Int, length: Int): Unit = {
    val bytes = buf.nioBuffer(index, length)
    while (bytes.hasRemaining) written += channel.write(bytes, written)
  }

  /** Bytes of the current record written so far. */
  def length: Long = written

  /** Maps the record written: its address, valid until [[reset]] or [[close]]. */
  def map(): Long = {
    mapped = channel.map(FileChannel.MapMode.READ_ONLY, 0, written)
    PlatformDependent.directBufferAddress(mapped)
  }

  /** The record was read: the next one is written from the file's start. */
  def reset(): Unit = {
    unmap()
    written = 0
  }

  /** Unmaps and deletes the file. Idempotent. */
  def close(): Unit = {
    unmap()
    try channel.close()
    finally Files.deleteIfExists(file.toPath)
  }

  private def unmap(): Unit = if (mapped != null) {
    val m = mapped
    mapped = null
    SpilledRecord.unsafe.invokeCleaner(m) // unmaps now, not when the collector finds the buffer
  }
}

object SpilledRecord {

  private val unsafe: sun.misc.Unsafe = {
    val f = classOf[sun.misc.Unsafe].getDeclaredField("theUnsafe")
    f.setAccessible(true)
    f.get(null).asInstanceOf[sun.misc.Unsafe]
  }

  /** A spilled record's file in `budget`'s dir; an error names the file and the setting behind it. */
  def open(budget: SpanningRecordBudget, length: Int): SpilledRecord = {
    val file = budget.spillFile()
    try new SpilledRecord(file)
    catch {
      case e: IOException => throw failed(file, length, e)
    }
  }

  /** A spilled record could not be written or read back (the local disk, not the producer). */
  def failed(file: File, length: Int, cause: IOException): IOException =
    new IOException(
      s"Could not gather a record of $length bytes in $file, a local dir of this executor " +
        s"(records above spark.sluice.memory.recordSpillThreshold are gathered on disk): ${cause.getMessage}", cause)
}
