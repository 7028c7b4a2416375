package io.sluice.netty

import io.netty.buffer.ByteBuf
import io.sluice.netty.NettyMessage.check
import io.sluice.partition.ResultPartitionID

/** One input of a [[MultiPartitionRequest]]: subpartitions [start, end) of one result partition. */
final case class RequestedSubpartitions(partitionId: ResultPartitionID, subpartitionStart: Int, subpartitionEnd: Int)

/**
 * Client to server: start sending every listed input (subpartitions of several result partitions of
 * the server's executor, the map outputs one reduce task reads from there) to `receiverId`, one after
 * another, as ONE stream: one reader, one backlog, one credit (FLINK-33743 lets a channel consume a
 * range of subpartitions of one producer; this goes further and spans every producer of the
 * executor). The server answers with [[PackedBufferResponse]]s only, whose entries name the input
 * by its position in `inputs`. Only finished (blocking) partitions can be requested this way.
 */
final case class MultiPartitionRequest(
    receiverId: InputChannelID,
    credit: Int,
    creditBased: Boolean,
    inputs: IndexedSeq[RequestedSubpartitions]) extends NettyMessage {

  override def id: Byte = MultiPartitionRequest.Id
  override def encodedLength: Int = MultiPartitionRequest.FixedLength + inputs.size * MultiPartitionRequest.InputLength

  override def encode(buf: ByteBuf): Unit = {
    receiverId.writeTo(buf)
    buf.writeInt(credit)
    buf.writeByte(if (creditBased) 2 else 0)
    buf.writeInt(inputs.size)
    inputs.foreach { in =>
      buf.writeInt(in.partitionId.shuffleId)
      buf.writeLong(in.partitionId.producerId)
      buf.writeInt(in.subpartitionStart)
      buf.writeInt(in.subpartitionEnd)
    }
  }
}

object MultiPartitionRequest extends NettyMessage.Type {
  final val Id: Byte = 9

  /** Receiver id, credit, flags and the number of inputs. */
  val FixedLength: Int = InputChannelID.Length + 4 + 1 + 4

  /** Shuffle id, producer id, subpartition start and end of one input. */
  val InputLength: Int = 4 + 8 + 4 + 4

  override def minBodyLength: Int = FixedLength + InputLength
  override def maxBodyLength: Int = Int.MaxValue
  override def receiverIdFirst: Boolean = true

  /**
   * The most inputs one request names in frames of at most `maxFrameLength` bytes
   * (spark.sluice.network.maxFrameLength): a reducer splits the inputs of one executor into
   * requests of this many at most, one packed channel each.
   */
  def maxInputs(maxFrameLength: Long): Int =
    math.max(1L, (maxFrameLength - NettyMessage.FrameHeaderLength - FixedLength) / InputLength).min(Int.MaxValue).toInt

  override def decode(buf: ByteBuf, bodyLength: Int): MultiPartitionRequest = {
    val receiver = InputChannelID.readFrom(buf)
    val credit = buf.readInt()
    val flags = buf.readByte()
    val n = buf.readInt()
    check(credit >= 0, s"MultiPartitionRequest with credit $credit")
    check((flags & ~2) == 0, s"MultiPartitionRequest with unknown flags 0x${Integer.toHexString(flags & 0xff)}")
    check(n > 0 && FixedLength.toLong + n.toLong * InputLength == bodyLength,
      s"MultiPartitionRequest of $n inputs in a $bodyLength-byte body")
    val inputs = IndexedSeq.fill(n) {
      val shuffle = buf.readInt()
      val producer = buf.readLong()
      val start = buf.readInt()
      val end = buf.readInt()
      check(start >= 0 && end > start, s"MultiPartitionRequest for subpartitions [$start, $end)")
      RequestedSubpartitions(ResultPartitionID(shuffle, producer), start, end)
    }
    MultiPartitionRequest(receiver, credit, (flags & 2) != 0, inputs)
  }
}
