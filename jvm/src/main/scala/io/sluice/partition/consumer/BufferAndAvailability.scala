package io.sluice.partition.consumer

import io.netty.buffer.ByteBuf
import io.sluice.partition.BufferIv

/**
 * What an input channel hands its gate (Flink's InputChannel.BufferAndAvailability): a buffer as
 * it arrived (possibly compressed, possibly encrypted, possibly with the CRC32C its producer
 * stored), or the end of the partition; the gate's input it belongs to; and whether the channel
 * has more right now. The gate owns `buffer` and releases it.
 *
 * @param input     the index of its input among the gate's inputs
 * @param rawLength the decompressed length when `compressed`, else -1
 * @param crc       CRC32C of the buffer's bytes as stored (before encryption), when `hasChecksum`
 * @param iv        the IV the buffer was encrypted from (a spilled buffer of an encrypted partition file), or null
 */
final class BufferAndAvailability(
    val input: Int,
    val buffer: ByteBuf,
    val subpartition: Int,
    val compressed: Boolean,
    val rawLength: Int,
    val hasChecksum: Boolean,
    val crc: Int,
    val moreAvailable: Boolean,
    val iv: BufferIv = null) {

  def isEndOfPartition: Boolean = buffer == null
}

object BufferAndAvailability {
  def endOfPartition(input: Int, subpartition: Int, moreAvailable: Boolean = false): BufferAndAvailability =
    new BufferAndAvailability(input, null, subpartition, false, -1, false, 0, moreAvailable)
}
