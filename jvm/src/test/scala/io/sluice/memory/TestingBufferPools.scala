package io.sluice.memory

import org.scalatest.Assertions._

/**
 * The leak check every buffer-touching test runs under: a fresh [[NetworkBufferPool]] for the
 * body, and afterwards the assertion that it is full again. Every pooled segment comes back only
 * when the last reference to its buffer (builder, consumer, every slice) is released, so a full
 * pool also means no buffer was left with a positive refCnt; an over-release would already have
 * failed in Netty, and a segment recycled twice would make the pool report more than it holds.
 */
object TestingBufferPools {

  def withNetworkBufferPool[T](totalSegments: Int, segmentSize: Int = 4096)(body: NetworkBufferPool => T): T = {
    val global = new NetworkBufferPool(totalSegments, segmentSize)
    try {
      val result = body(global)
      assertFull(global)
      result
    } finally global.destroy()
  }

  def assertFull(global: NetworkBufferPool): Unit = {
    assert(global.numberOfAvailableSegments == global.totalSegments,
      s"${global.numberOfUsedSegments} network segments were not given back: $global")
    assert(global.numberOfPools == 0, s"local buffer pools were left undestroyed: $global")
    assert(global.numberOfRequiredSegments == 0, s"required segments were left counted: $global")
  }
}
