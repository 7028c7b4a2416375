package io.sluice.netty

import java.nio.charset.StandardCharsets

import io.netty.buffer.ByteBuf
import io.sluice.netty.NettyMessage.check
import io.sluice.partition.ResultPartitionID

/** One input of a [[MultiPartitionRequest]]: subpartitions [start, end) of one result partition. */
final case class RequestedSubpartitions(partitionId: ResultPartitionID, subpartitionStart: Int, subpartitionEnd: Int)

/**
 * Client to server: start sending every listed input (subpartitions of several result partitions of
 * one executor, the map outputs one reduce task reads from there) to `receiverId`, one after
 * another, as ONE stream: one reader, one backlog, one credit (FLINK-33743 lets a channel consume a
 * range of subpartitions of one producer; this goes further and spans every producer of the
 * executor). The server answers with [[PackedBufferResponse]]s only, whose entries name the input
 * by its position in `inputs`. Only finished (blocking) partitions can be requested this way.
 * `producerExecutor` names the executor that wrote the inputs when the server is a node shuffle
 * service serving several executors' map outputs; an executor's own server is sent none.
 */
final case class MultiPartitionRequest(
    receiverId: InputChannelID,
    credit: Int,
    creditBased: Boolean,
    inputs: IndexedSeq[RequestedSubpartitions],
    producerExecutor: Option[String] = None) extends NettyMessage {

  private val executorBytes = producerExecutor.map(MultiPartitionRequest.executorIdBytes)

  override def id: Byte = MultiPartitionRequest.Id
  override def encodedLength: Int = MultiPartitionRequest.FixedLength + executorBytes.fold(0)(2 + _.length) +
    inputs.size * MultiPartitionRequest.InputLength

  override def encode(buf: ByteBuf): Unit = {
    receiverId.writeTo(buf)
    buf.writeInt(credit)
    buf.writeByte((if (creditBased) 2 else 0) | (if (executorBytes.isDefined) 4 else 0))
    buf.writeInt(inputs.size)
    executorBytes.foreach { b =>
      buf.writeShort(b.length)
      buf.writeBytes(b)
    }
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

  /** The longest producer executor id a request carries, in UTF-8 bytes (Spark's ids are short numbers). */
  val MaxExecutorIdBytes: Int = 255

  override def minBodyLength: Int = FixedLength + InputLength
  override def maxBodyLength: Int = Int.MaxValue
  override def receiverIdFirst: Boolean = true

  private def executorIdBytes(executorId: String): Array[Byte] = {
    val b = executorId.getBytes(StandardCharsets.UTF_8)
    require(b.nonEmpty && b.length <= MaxExecutorIdBytes, s"executor id '$executorId' is not 1 to $MaxExecutorIdBytes bytes")
    b
  }

  /**
   * The most inputs one request names in frames of at most `maxFrameLength` bytes
   * (spark.sluice.network.maxFrameLength), room for a producer executor id included: a reducer
   * splits the inputs of one executor into requests of this many at most, one packed channel each.
   */
  def maxInputs(maxFrameLength: Long): Int =
    math.max(1L, (maxFrameLength - NettyMessage.FrameHeaderLength - FixedLength - 2 - MaxExecutorIdBytes) / InputLength)
      .min(Int.MaxValue).toInt

  override def decode(buf: ByteBuf, bodyLength: Int): MultiPartitionRequest = {
    val receiver = InputChannelID.readFrom(buf)
    val credit = buf.readInt()
    val flags = buf.readByte()
    val n = buf.readInt()
    check(credit >= 0, s"MultiPartitionRequest with credit $credit")
    check((flags & ~6) == 0, s"MultiPartitionRequest with unknown flags 0x${Integer.toHexString(flags & 0xff)}")
    val executor =
      if ((flags & 4) == 0) None
      else {
        check(bodyLength >= FixedLength + 2, s"MultiPartitionRequest of $bodyLength bytes names no executor")
        val len = buf.readUnsignedShort()
        check(len > 0 && len <= MaxExecutorIdBytes && buf.readableBytes() >= len,
          s"MultiPartitionRequest with a producer executor id of $len bytes")
        val bytes = new Array[Byte](len)
        buf.readBytes(bytes)
        Some(new String(bytes, StandardCharsets.UTF_8))
      }
    val header = FixedLength + executor.fold(0)(e => 2 + e.getBytes(StandardCharsets.UTF_8).length)
    check(n > 0 && header.toLong + n.toLong * InputLength == bodyLength,
      s"MultiPartitionRequest of $n inputs in a $bodyLength-byte body")
    val inputs = IndexedSeq.fill(n) {
      val shuffle = buf.readInt()
      val producer = buf.readLong()
      val start = buf.readInt()
      val end = buf.readInt()
      check(start >= 0 && end > start, s"MultiPartitionRequest for subpartitions [$start, $end)")
      RequestedSubpartitions(ResultPartitionID(shuffle, producer), start, end)
    }
    MultiPartitionRequest(receiver, credit, (flags & 2) != 0, inputs, executor)
  }
}
