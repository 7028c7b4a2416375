package io.sluice.serialization

import java.io.File

/**
 * What the [[SpanningRecordDeserializer]]s of one reader share: the heap they may hold for records
 * that span buffers, and where a record beyond it is gathered instead. A record is gathered in the
 * heap when it is at most `threshold` bytes and the arrays of all the reader's deserializers stay
 * within `threshold` together; otherwise in a file from `newFile` ([[SpilledRecord]]). Flink's
 * SpillingAdaptiveSpanningRecordDeserializer spills records above a threshold of its own; the sum
 * is what keeps a reduce task's heap flat while it reads a record from every executor at once.
 * Task thread only.
 *
 * @param newFile a new file in Spark's local dirs, not yet created
 */
final class SpanningRecordBudget(val threshold: Long, newFile: () => File) {
  require(threshold > 0, s"a spill threshold of $threshold bytes")

  private var held = 0L

  /** Bytes of the deserializers' arrays (their capacity, in use or kept for the next record). */
  def heldBytes: Long = held

  /** Reserves `n` more bytes of arrays; false, reserving nothing, when that would pass the threshold. */
  def tryReserve(n: Long): Boolean =
    if (n > threshold - held) false
    else { held += n; true }

  /** An array of `n` bytes was dropped. */
  def release(n: Long): Unit = held -= n

  /** Where the next record beyond the budget is gathered. */
  def spillFile(): File = newFile()
}

object SpanningRecordBudget {

  /** No bound: every record is gathered in the heap (one deserializer's own, outside a reduce task). */
  def unbounded(): SpanningRecordBudget = new SpanningRecordBudget(Long.MaxValue,
    () => throw new IllegalStateException("an unbounded spanning record budget never spills"))
}
