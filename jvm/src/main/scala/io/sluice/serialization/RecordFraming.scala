package io.sluice.serialization

/**
 * How records sit in network buffers. Every element is a frame:
 * {{{
 *   +----------------------+---------------------------+
 *   | length: int32 (BE)   | payload: `length` bytes    |   a record (length >= 0)
 *   +----------------------+---------------------------+
 *   | -1: int32 (BE)       | createdAtMillis: int64,   |   a latency marker
 *   |                      | producerStage: int32,     |
 *   |                      | producerIndex: int32      |
 *   +----------------------+---------------------------+
 * }}}
 * A frame may start in one buffer and end in a later one (records larger than a buffer span
 * several); frames of one subpartition never interleave with another's.
 */
object RecordFraming {
  val HeaderSize = 4
  val LatencyMarker: Int = -1
  val LatencyMarkerSize = 16

  /** Larger lengths can only come from corrupt bytes. */
  val MaxRecordSize: Int = 1 << 30
}
