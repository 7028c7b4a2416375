package io.sluice.serialization

import io.netty.buffer.ByteBuf
import org.apache.spark.unsafe.Platform

/**
 * Reads length-framed elements ([[RecordFraming]]) back out of a sequence of buffers of one
 * channel (Flink's SpillingAdaptiveSpanningRecordDeserializer): a record that lies entirely in the
 * current buffer is returned in place, without copying; one that starts in this buffer and ends
 * in a later one is gathered into an array, taken with the first such record, that grows to the
 * largest record seen ([[clear]] keeps it for the next input, [[release]] drops it), as far as the
 * reader's [[SpanningRecordBudget]] allows; a record beyond it is gathered in a file
 * ([[SpilledRecord]]) and read from there in place. It never blocks: when the current buffer ends
 * inside a record it answers [[SpanningRecordDeserializer.NeedMoreData]] and continues with the
 * next buffer. One per input being read; single-threaded.
 */
final class SpanningRecordDeserializer(budget: SpanningRecordBudget = SpanningRecordBudget.unbounded()) {
  import SpanningRecordDeserializer._

  private var buffer: ByteBuf = _
  private var address = 0L
  private var position = 0
  private var limit = 0

  // A frame that spans buffers: its header so far, then its payload so far.
  private val header = new Array[Byte](RecordFraming.HeaderSize)
  private var headerFilled = 0
  private var spanning = EmptySpan
  private var spanningLength = -1 // payload length of the spanning frame, once its header is complete
  private var spanningFilled = 0

  // A spanning record beyond the budget goes to `spill`'s file; `spilledOut`: one was handed out,
  // mapped, and is dropped at the next call.
  private var spill: SpilledRecord = _
  private var spilling = false
  private var spilledOut = false

  /** Starts reading `buf` (its readable bytes). The caller keeps it alive until NeedMoreData. */
  def setNextBuffer(buf: ByteBuf): Unit = {
    require(position == limit, "the previous buffer still holds unread elements")
    buffer = buf
    address = buf.memoryAddress() + buf.readerIndex()
    position = 0
    limit = buf.readableBytes()
  }

  /** The current buffer, to be released by the caller after NeedMoreData. */
  def currentBuffer: ByteBuf = buffer

  /** Reads the next element into `view`: Record, LatencyMarker, or NeedMoreData. */
  def readNext(view: RecordView): Int = {
    if (spilledOut) { spilledOut = false; spill.reset() }
    if (headerFilled > 0 || spanningLength >= 0) return continueSpanning(view)
    val remaining = limit - position
    if (remaining >= RecordFraming.HeaderSize) {
      val len = readIntBE(address + position)
      val payload = payloadLength(len)
      if (remaining - RecordFraming.HeaderSize >= payload) {
        position += RecordFraming.HeaderSize
        val at = address + position
        position += payload
        return emit(len, null, at, payload, view)
      }
      position += RecordFraming.HeaderSize
      startSpanning(len)
      copyPayload()
      NeedMoreData
    } else {
      while (position < limit) {
        header(headerFilled) = Platform.getByte(null, address + position); headerFilled += 1; position += 1
      }
      NeedMoreData
    }
  }

  private def continueSpanning(view: RecordView): Int = {
    if (spanningLength < 0) {
      while (headerFilled < RecordFraming.HeaderSize && position < limit) {
        header(headerFilled) = Platform.getByte(null, address + position); headerFilled += 1; position += 1
      }
      if (headerFilled < RecordFraming.HeaderSize) return NeedMoreData
      val len = ((header(0) & 0xff) << 24) | ((header(1) & 0xff) << 16) | ((header(2) & 0xff) << 8) | (header(3) & 0xff)
      startSpanning(len)
    }
    copyPayload()
    val payload = payloadLength(frameHeader)
    if (spanningFilled < payload) NeedMoreData
    else {
      val len = frameHeader
      spanningLength = -1
      headerFilled = 0
      if (!spilling) emit(len, spanning, Platform.BYTE_ARRAY_OFFSET, payload, view)
      else {
        spilling = false
        spilledOut = true
        val at =
          try spill.map()
          catch { case e: java.io.IOException => throw SpilledRecord.failed(spill.file, payload, e) }
        emit(len, null, at, payload, view)
      }
    }
  }

  private var frameHeader = 0

  private def startSpanning(len: Int): Unit = {
    val payload = payloadLength(len)
    frameHeader = len
    spilling = spanning.length < payload && !growSpanning(payload)
    if (spilling && spill == null) spill = SpilledRecord.open(budget, payload)
    spanningLength = payload
    spanningFilled = 0
    headerFilled = RecordFraming.HeaderSize
  }

  /**
   * Grows the array to hold `payload` bytes (doubling, within the budget's threshold), if the
   * budget has room for it; false, leaving it as it is, when the record must go to disk.
   */
  private def growSpanning(payload: Int): Boolean = {
    if (payload > budget.threshold) return false
    val doubled = math.min(math.max(payload.toLong, spanning.length * 2L), math.min(budget.threshold, MaxArray))
    val size =
      if (budget.tryReserve(doubled - spanning.length)) doubled
      else if (budget.tryReserve(payload.toLong - spanning.length)) payload.toLong
      else return false
    spanning = new Array[Byte](size.toInt) // replaces the old array: the budget counts the difference
    true
  }

  private def copyPayload(): Unit = {
    val n = math.min(spanningLength - spanningFilled, limit - position)
    if (n > 0) {
      if (!spilling) Platform.copyMemory(null, address + position, spanning, Platform.BYTE_ARRAY_OFFSET + spanningFilled, n)
      else {
        try spill.append(buffer, buffer.readerIndex() + position, n)
        catch { case e: java.io.IOException => throw SpilledRecord.failed(spill.file, spanningLength, e) }
      }
      spanningFilled += n
      position += n
    }
  }

  private def payloadLength(header: Int): Int =
    if (header >= 0) {
      if (header > RecordFraming.MaxRecordSize) throw new CorruptFrameException(s"Corrupt record frame: length $header")
      header
    } else if (header == RecordFraming.LatencyMarker) RecordFraming.LatencyMarkerSize
    else throw new CorruptFrameException(s"Corrupt record frame: length $header")

  private def emit(header: Int, base: AnyRef, offset: Long, length: Int, view: RecordView): Int = {
    if (header >= 0) {
      view.base = base; view.offset = offset; view.length = length
      Record
    } else {
      view.markerCreatedAtMillis = readLongBE(base, offset)
      view.markerProducerStage = readIntBE(base, offset + 8)
      view.markerProducerIndex = readIntBE(base, offset + 12)
      LatencyMarker
    }
  }

  /** Whether a frame is partly read (the channel ended inside a record if this is true at its end). */
  def hasPartialRecord: Boolean = headerFilled > 0 || spanningLength >= 0

  /** Whether the current buffer has unread bytes. */
  def hasUnreadData: Boolean = position < limit

  /**
   * Forgets everything read (the input failed or ended) and deletes the spill file, if any; keeps
   * the spanning array. Does not release the buffer.
   */
  def clear(): Unit = {
    buffer = null; position = 0; limit = 0; headerFilled = 0; spanningLength = -1; spanningFilled = 0
    spilling = false; spilledOut = false
    if (spill != null) {
      val s = spill
      spill = null
      s.close()
    }
  }

  /** [[clear]], and drops the spanning array. */
  def release(): Unit = {
    clear()
    budget.release(spanning.length.toLong)
    spanning = EmptySpan
  }

  /** Whether the record being gathered, or the one last handed out, is in a file (tests). */
  def isSpilling: Boolean = spilling || spilledOut

  /** The file spilled records are gathered in while one is, else null (tests). */
  def spillFile: java.io.File = if (spill == null) null else spill.file

  /** Bytes of the array spanning records are gathered in (0 until the first such record). */
  def spanningCapacity: Int = spanning.length

  private def readIntBE(at: Long): Int = readIntBE(null, at)

  private def readIntBE(base: AnyRef, at: Long): Int = {
    val v = Platform.getInt(base, at)
    if (LittleEndian) Integer.reverseBytes(v) else v
  }

  private def readLongBE(base: AnyRef, at: Long): Long = {
    val v = Platform.getLong(base, at)
    if (LittleEndian) java.lang.Long.reverseBytes(v) else v
  }
}

object SpanningRecordDeserializer {
  final val Record = 1
  final val LatencyMarker = 2
  final val NeedMoreData = 3

  private val EmptySpan = new Array[Byte](0)

  /** The largest array the JVM allocates. */
  private val MaxArray = Int.MaxValue - 8L

  private val LittleEndian = java.nio.ByteOrder.nativeOrder() == java.nio.ByteOrder.LITTLE_ENDIAN
}

/** The bytes of a channel do not form valid frames (a corrupt or truncated buffer). */
final class CorruptFrameException(msg: String) extends java.io.IOException(msg)
