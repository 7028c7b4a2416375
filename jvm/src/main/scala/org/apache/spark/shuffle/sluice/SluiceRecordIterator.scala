package org.apache.spark.shuffle.sluice

import io.sluice.metrics.{LatencyStats, SimpleCounter}
import io.sluice.partition.consumer.{InputBuffer, InputChannelException, SingleInputGate}
import io.sluice.serialization.{CorruptFrameException, RecordView, SpanningRecordBudget, SpanningRecordDeserializer}
import org.apache.spark.TaskContext
import org.apache.spark.shuffle.ShuffleReadMetricsReporter
import org.apache.spark.shuffle.sluice.internal.SparkInternals

/**
 * The records of an input gate, on the reduce task's thread: takes buffers from whichever channel
 * has one, deserialises them with their input's (map output's) [[SpanningRecordDeserializer]] and the
 * dependency's serializer, and feeds Spark's read metrics and Sluice's (numRecordsIn, and the
 * age of latency markers when latency tracking is on). An input's deserialiser is taken from a
 * small pool at its first buffer and goes back at its end (the gate tells it), when the decoder
 * also drops the input's stream: decode state is held for the inputs in flight, not for every
 * map output read; their records that span buffers share the `spanning` budget, beyond which
 * they are gathered on disk. Any failure of a channel (lost producer, missing partition, checksum
 * mismatch, corrupt frame, an input ending inside a record) is thrown here, on the task thread,
 * as a FetchFailedException for the map output it concerns (for a channel that reads many, one of
 * them not fully read yet: Spark then recomputes that executor's outputs), so Spark recomputes
 * it; any other error (an OutOfMemoryError, a bug, a server's own failure or refusal) fails the
 * task as itself, and Spark retries it.
 */
private[sluice] final class SluiceRecordIterator(
    gate: SingleInputGate,
    outputs: IndexedSeq[MapOutput],
    shuffleId: Int,
    decoder: SparkRecordDecoder,
    context: TaskContext,
    metrics: ShuffleReadMetricsReporter,
    numRecordsIn: Option[SimpleCounter] = None,
    latency: Option[LatencyStats] = None,
    spanning: SpanningRecordBudget = SpanningRecordBudget.unbounded()) extends Iterator[Product2[Any, Any]] {

  private val recordsIn = numRecordsIn.orNull
  private val latencyStats = latency.orNull

  /** Per input: its deserialiser while it is being read, else null. */
  private val deserializers = new Array[SpanningRecordDeserializer](outputs.size)
  private var numLive = 0

  /** Deserialisers of ended inputs, cleared, for the next ones (never more than were live at once). */
  private val idleDeserializers = new java.util.ArrayDeque[SpanningRecordDeserializer]()
  private val lastSubpartition = Array.fill(outputs.size)(-1)
  private val view = new RecordView
  private var current: InputBuffer = _
  private var nextRecord: Product2[Any, Any] = _
  private var done = false
  private var closed = false
  private var lastIdleNanos = 0L

  gate.setInputEndListener(in => endInput(in))

  /** Inputs whose deserialiser is held: those begun and not ended (tests). */
  def numLiveDeserializers: Int = numLive

  /** Deserialisers this iterator made: the most inputs it ever read at once (tests). */
  def numDeserializers: Int = numLive + idleDeserializers.size

  override def hasNext: Boolean = nextRecord != null || (!done && advance())

  override def next(): Product2[Any, Any] = {
    if (!hasNext) throw new NoSuchElementException("no more shuffle records")
    val r = nextRecord
    nextRecord = null
    metrics.incRecordsRead(1)
    if (recordsIn != null) recordsIn.inc()
    r
  }

  private def advance(): Boolean = {
    while (true) {
      if (current != null) {
        val in = current.input
        val kind =
          try deserializers(in).readNext(view)
          catch {
            case e: CorruptFrameException => throw fetchFailed(in, e.getMessage, e)
          }
        kind match {
          case SpanningRecordDeserializer.Record =>
            nextRecord = decoder.decode(in, view)
            return true
          case SpanningRecordDeserializer.LatencyMarker =>
            if (latencyStats != null) {
              latencyStats.reportLatency(view.markerCreatedAtMillis, view.markerProducerStage, view.markerProducerIndex)
            }
          case _ =>
            current.buffer.release()
            current = null
        }
      } else {
        val next =
          try gate.getNext()
          catch {
            case e: InputChannelException => throw fetchFailed(gate.inputToBlame(e), e.getMessage, e)
          } finally reportFetchWait()
        if (next == null) {
          // Every input's end was seen (and checked) by now; a gate that ended without one is a bug.
          deserializers.indices.find(deserializers(_) != null).foreach { in =>
            throw new IllegalStateException(s"$gate ended before the end of ${describe(in)}")
          }
          done = true
          close()
          return false
        }
        val in = next.input
        if (deserializers(in) == null) begin(in)
        if (next.subpartition != lastSubpartition(in)) {
          if (deserializers(in).hasPartialRecord) {
            next.buffer.release()
            throw fetchFailed(in, s"subpartition ${lastSubpartition(in)} of ${describe(in)} ended inside a record", null)
          }
          lastSubpartition(in) = next.subpartition
          decoder.startStream(in)
          if (next.isRemote) metrics.incRemoteBlocksFetched(1) else metrics.incLocalBlocksFetched(1)
        }
        // Spark's read bytes are the bytes as shuffled (compressed when spark.shuffle.compress).
        val size = next.transferredBytes
        if (next.isRemote) metrics.incRemoteBytesRead(size) else metrics.incLocalBytesRead(size)
        deserializers(in).setNextBuffer(next.buffer)
        current = next
      }
    }
    false
  }

  private def begin(in: Int): Unit = {
    val d = idleDeserializers.poll()
    deserializers(in) = if (d != null) d else new SpanningRecordDeserializer(spanning)
    numLive += 1
  }

  /**
   * The gate read input `in`'s end (inside [[SingleInputGate.getNext]]): it must end on a record
   * boundary; its deserialiser goes back to the pool, its stream is dropped.
   */
  private def endInput(in: Int): Unit = {
    val d = deserializers(in)
    if (d != null) {
      if (d.hasPartialRecord) throw fetchFailed(in, s"the data of ${describe(in)} ended inside a record", null)
      d.clear()
      deserializers(in) = null
      numLive -= 1
      idleDeserializers.push(d)
    }
    decoder.endInput(in)
  }

  private def reportFetchWait(): Unit = {
    val idle = gate.idleTimeNanos.sum()
    metrics.incFetchWaitTime((idle - lastIdleNanos) / 1000000L)
    lastIdleNanos = idle - (idle - lastIdleNanos) % 1000000L
  }

  /** How errors name an input: its map output and where it was read from. */
  private def describe(input: Int): String = {
    val o = outputs(input)
    s"map output ${o.mapId} (map index ${o.mapIndex}) of executor ${o.location.executorId}"
  }

  private def fetchFailed(input: Int, message: String, cause: Throwable): Exception = {
    val o = outputs(input)
    close()
    SparkInternals.fetchFailed(o.location, shuffleId, o.mapId, o.mapIndex, o.startPartition, message, cause)
  }

  /** Returns every buffer and closes the gate; merges the read metrics into the task's. */
  def close(): Unit = if (!closed) {
    closed = true
    if (current != null) { current.buffer.release(); current = null }
    deserializers.foreach(d => if (d != null) d.release())
    java.util.Arrays.fill(deserializers.asInstanceOf[Array[AnyRef]], null)
    numLive = 0
    idleDeserializers.forEach(_.release())
    idleDeserializers.clear()
    try gate.close()
    finally SparkInternals.mergeShuffleReadMetrics(context)
  }
}
