package io.sluice.netty

import scala.collection.immutable.ArraySeq

import io.netty.buffer.ByteBuf
import io.sluice.netty.NettyMessage.check
import io.sluice.partition.{BufferIv, SpilledBuffer}

/**
 * One entry of a [[PackedBufferResponse]]: a stored buffer of input `input` (its bytes are the
 * next `length` bytes of the payload; compressed, with a checksum and encrypted exactly as a
 * BufferResponse's), or (`isEnd`, no bytes) the end of that input.
 */
final case class PackedEntry(
    input: Int,
    subpartition: Int,
    isEnd: Boolean,
    compressed: Boolean,
    hasChecksum: Boolean,
    rawLength: Int,
    crc: Int,
    length: Int,
    iv: BufferIv) {

  def encodedLength: Int = PackedEntry.Length + (if (iv != null) BufferIv.Length else 0)
}

object PackedEntry {

  /** Input, subpartition, flags, raw length, CRC32C and length; an IV follows when encrypted. */
  val Length: Int = 4 + 4 + 1 + 4 + 4 + 4
  private val Compressed = 1
  private val Checksum = 2
  private val Encrypted = 4
  private val End = 8

  def end(input: Int, subpartition: Int): PackedEntry =
    PackedEntry(input, subpartition, isEnd = true, compressed = false, hasChecksum = false, -1, 0, 0, null)

  def of(input: Int, spilled: SpilledBuffer, subpartition: Int): PackedEntry =
    PackedEntry(input, subpartition, isEnd = false, spilled.isCompressed, hasChecksum = true, spilled.rawLength,
      spilled.crc, spilled.storedLength, spilled.iv)

  private[netty] def write(e: PackedEntry, buf: ByteBuf): Unit = {
    buf.writeInt(e.input)
    buf.writeInt(e.subpartition)
    buf.writeByte((if (e.compressed) Compressed else 0) | (if (e.hasChecksum) Checksum else 0) |
      (if (e.iv != null) Encrypted else 0) | (if (e.isEnd) End else 0))
    buf.writeInt(e.rawLength)
    buf.writeInt(e.crc)
    buf.writeInt(e.length)
    if (e.iv != null) e.iv.writeTo(buf)
  }

  private[netty] def read(buf: ByteBuf): PackedEntry = {
    val input = buf.readInt()
    val sub = buf.readInt()
    val flags = buf.readByte()
    val raw = buf.readInt()
    val crc = buf.readInt()
    val length = buf.readInt()
    check((flags & ~15) == 0, s"PackedBufferResponse entry with unknown flags 0x${Integer.toHexString(flags & 0xff)}")
    val isEnd = (flags & End) != 0
    val compressed = (flags & Compressed) != 0
    val iv = if ((flags & Encrypted) != 0) BufferIv.readFrom(buf) else null
    check(input >= 0 && sub >= 0, s"PackedBufferResponse entry for input $input, subpartition $sub")
    check(if (isEnd) length == 0 && flags == End else length > 0,
      s"PackedBufferResponse entry of $length bytes with flags 0x${Integer.toHexString(flags & 0xff)}")
    check(if (compressed) raw >= 0 else raw == -1, s"PackedBufferResponse entry with raw length $raw")
    check(iv == null || (flags & Checksum) != 0, "PackedBufferResponse entry encrypted but without a checksum")
    PackedEntry(input, sub, isEnd, compressed, (flags & Checksum) != 0, raw, crc, length, iv)
  }
}

/**
 * Server to client: one credit's worth of a [[MultiPartitionRequest]]'s stream. Many small
 * stored buffers (and the ends of their inputs) travel in one frame and one receiver buffer, as
 * Flink's sort-merge reader packs small regions into one full buffer; the receiver splits the
 * payload again by the entries' lengths. The fields are the receiver id, the sequence number, the
 * backlog (frames still to come, estimated from the bytes left), the length of the entry table, the
 * payload size, then the entries, then the payload: the data entries' bytes, back to back. `data`
 * is the payload: on the server read from the partition files off the event loop (null when the
 * frame carries ends only), on the client the receiver's buffer (null when discarded).
 */
final case class PackedBufferResponse(
    receiverId: InputChannelID,
    sequenceNumber: Int,
    backlog: Int,
    entries: IndexedSeq[PackedEntry],
    payloadSize: Int)(val data: ByteBuf) extends PayloadResponse {

  override def id: Byte = PackedBufferResponse.Id

  private def entriesLength: Int = {
    var n = 0
    var i = 0
    while (i < entries.length) { n += entries(i).encodedLength; i += 1 }
    n
  }

  override def encodedLength: Int = PackedBufferResponse.FixedLength + entriesLength

  override def encode(buf: ByteBuf): Unit = {
    receiverId.writeTo(buf)
    buf.writeInt(sequenceNumber)
    buf.writeInt(backlog)
    buf.writeInt(entriesLength)
    buf.writeInt(payloadSize)
    var i = 0
    while (i < entries.length) { PackedEntry.write(entries(i), buf); i += 1 }
  }

  override def withData(buffer: ByteBuf): PackedBufferResponse = copy()(buffer)
}

object PackedBufferResponse extends NettyMessage.Type {
  final val Id: Byte = 10

  /** Receiver id, sequence number, backlog, entry table length, payload size. */
  val FixedLength: Int = InputChannelID.Length + 4 + 4 + 4 + 4
  private val EntriesLengthOffset = InputChannelID.Length + 4 + 4

  /** Most entries in one frame (bounds the decoder's header buffer). */
  val MaxEntries = 256
  val MaxHeaderLength: Int = FixedLength + MaxEntries * (PackedEntry.Length + BufferIv.Length)

  override def minBodyLength: Int = FixedLength + PackedEntry.Length
  override def maxBodyLength: Int = Int.MaxValue
  override def receiverIdFirst: Boolean = true
  override def prefixLength(bodyLength: Int): Int = FixedLength
  override def fieldsLength(prefix: ByteBuf, bodyLength: Int): Int = headerLength(prefix)

  /** The whole header's length, given its first [[FixedLength]] bytes at `buf`'s reader index. */
  def headerLength(buf: ByteBuf): Int = {
    val entries = buf.getInt(buf.readerIndex() + EntriesLengthOffset)
    check(entries >= PackedEntry.Length && entries <= MaxHeaderLength - FixedLength,
      s"PackedBufferResponse with a $entries-byte entry table")
    FixedLength + entries
  }

  override def decode(buf: ByteBuf, bodyLength: Int): PackedBufferResponse = {
    val receiver = InputChannelID.readFrom(buf)
    val seq = buf.readInt()
    val backlog = buf.readInt()
    val entriesLength = buf.readInt()
    val size = buf.readInt()
    val end = buf.readerIndex() + entriesLength
    // As many entries as the table can hold (fewer when they carry IVs): one array per frame.
    var entries = new Array[PackedEntry](entriesLength / PackedEntry.Length)
    var n = 0
    var bytes = 0L
    while (buf.readerIndex() < end && n < entries.length) {
      val e = PackedEntry.read(buf)
      bytes += e.length
      entries(n) = e
      n += 1
    }
    if (n < entries.length) entries = java.util.Arrays.copyOf(entries, n)
    check(buf.readerIndex() == end, s"PackedBufferResponse whose entries overrun their $entriesLength-byte table")
    check(seq >= 0 && backlog >= 0, s"PackedBufferResponse with sequence number $seq, backlog $backlog")
    check(size >= 0 && bytes == size && size == bodyLength - FixedLength - entriesLength,
      s"PackedBufferResponse announcing a $size-byte payload, entries of $bytes bytes, in a frame with " +
        s"${bodyLength - FixedLength - entriesLength} payload bytes")
    PackedBufferResponse(receiver, seq, backlog, ArraySeq.unsafeWrapArray(entries), size)(null)
  }
}
