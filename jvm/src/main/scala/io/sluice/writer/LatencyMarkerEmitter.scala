package io.sluice.writer

import io.sluice.metrics.Clock

/**
 * Emits a latency marker through a [[RecordWriter]] every `intervalMs` (Flink's
 * LatencyMarkerEmitter at the sources, driven by metrics.latency.interval). Markers carry their
 * creation time and producer and travel through the same buffers as the records, so their age
 * at the consumer is the time spent in the network stack.
 *
 * The executor's [[OutputFlusher]] thread raises a volatile flag every interval; the producer
 * checks it after each record (one volatile read) and emits when it is up, so a slow producer
 * still gets its markers on time. The first record emits at once. [[close]] stops the timer.
 * Emitting belongs to the producer's task thread.
 */
final class LatencyMarkerEmitter(
    writer: RecordWriter[_],
    val intervalMs: Long,
    producerStage: Int,
    producerIndex: Int,
    clock: Clock,
    timer: OutputFlusher) {

  require(intervalMs > 0, s"latency markers need a positive interval, not $intervalMs")

  @volatile private var due = true
  private var emitted = 0L
  private val registration = timer.every(intervalMs)(() => due = true)

  /** Called after each record; emits a marker when one is due. */
  def onRecord(): Unit = if (due) emit()

  private def emit(): Unit = {
    due = false
    writer.broadcastLatencyMarker(clock.currentTimeMillis(), producerStage, producerIndex)
    emitted += 1
  }

  def numEmitted: Long = emitted

  def close(): Unit = registration.cancel()
}
