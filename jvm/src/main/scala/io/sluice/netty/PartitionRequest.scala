package io.sluice.netty

import io.netty.buffer.ByteBuf
import io.sluice.netty.NettyMessage.check
import io.sluice.partition.ResultPartitionID

/**
 * Client to server: start sending subpartitions [start, end) of a partition to `receiverId`.
 * `credit` is the receiver's exclusive buffers (ignored when `creditBased` is false: the server
 * then sends whenever it has data). With `waitForProducer`, a pipelined partition not registered
 * yet is waited for instead of answered with "partition not found".
 */
final case class PartitionRequest(
    partitionId: ResultPartitionID,
    subpartitionStart: Int,
    subpartitionEnd: Int,
    receiverId: InputChannelID,
    credit: Int,
    creditBased: Boolean,
    waitForProducer: Boolean) extends NettyMessage {

  override def id: Byte = PartitionRequest.Id
  override def encodedLength: Int = PartitionRequest.Length

  override def encode(buf: ByteBuf): Unit = {
    buf.writeInt(partitionId.shuffleId)
    buf.writeLong(partitionId.producerId)
    buf.writeInt(subpartitionStart)
    buf.writeInt(subpartitionEnd)
    receiverId.writeTo(buf)
    buf.writeInt(credit)
    buf.writeByte((if (waitForProducer) 1 else 0) | (if (creditBased) 2 else 0))
  }
}

object PartitionRequest extends NettyMessage.Type {
  final val Id: Byte = 0
  val Length: Int = 4 + 8 + 4 + 4 + InputChannelID.Length + 4 + 1
  override def minBodyLength: Int = Length

  override def decode(buf: ByteBuf, bodyLength: Int): PartitionRequest = {
    val shuffle = buf.readInt()
    val producer = buf.readLong()
    val start = buf.readInt()
    val end = buf.readInt()
    val receiver = InputChannelID.readFrom(buf)
    val credit = buf.readInt()
    val flags = buf.readByte()
    check(start >= 0 && end > start, s"PartitionRequest for subpartitions [$start, $end)")
    check(credit >= 0, s"PartitionRequest with credit $credit")
    check((flags & ~3) == 0, s"PartitionRequest with unknown flags 0x${Integer.toHexString(flags & 0xff)}")
    PartitionRequest(ResultPartitionID(shuffle, producer), start, end, receiver, credit,
      creditBased = (flags & 2) != 0, waitForProducer = (flags & 1) != 0)
  }
}
