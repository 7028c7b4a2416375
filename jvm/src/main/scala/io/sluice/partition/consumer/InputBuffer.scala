package io.sluice.partition.consumer

import io.netty.buffer.ByteBuf

/**
 * A buffer the gate hands the task: ready to deserialise (decompressed); released by the task.
 * `input` is the gate's input it belongs to (the reader keeps one deserialiser per input),
 * `transferredBytes` its size as its producer stored and sent it (compressed, when it was).
 */
final class InputBuffer(val buffer: ByteBuf, val input: Int, val channelIndex: Int, val subpartition: Int,
    val isRemote: Boolean, val transferredBytes: Int)

/** A buffer's bytes are not what its producer stored (checksum or compression mismatch). */
final class CorruptBufferException(msg: String) extends java.io.IOException(msg)
