package io.sluice.netty

import java.util.concurrent.ThreadLocalRandom

import io.netty.buffer.ByteBuf

/**
 * Names one remote input channel on the wire (Flink's InputChannelID): 128 random bits chosen by
 * the consumer, so ids never need coordinating and a stale one cannot be mistaken for a new one.
 * Immutable.
 */
final case class InputChannelID(upper: Long, lower: Long) {

  def writeTo(buf: ByteBuf): Unit = { buf.writeLong(upper); buf.writeLong(lower) }

  override def toString: String = f"$upper%016x$lower%016x"
}

object InputChannelID {
  val Length = 16

  def random(): InputChannelID = {
    val r = ThreadLocalRandom.current()
    InputChannelID(r.nextLong(), r.nextLong())
  }

  def readFrom(buf: ByteBuf): InputChannelID = InputChannelID(buf.readLong(), buf.readLong())
}
