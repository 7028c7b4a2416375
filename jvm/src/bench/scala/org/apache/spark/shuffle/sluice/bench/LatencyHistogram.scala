package org.apache.spark.shuffle.sluice.bench

/**
 * A log-linear histogram of latencies in microseconds for `sluice bench latency`: exact below 64
 * µs, then 64 buckets per power of two (under 1.6 % relative error), from 0 to about 2^40 µs.
 * Plays the part of Flink's DescriptiveStatisticsHistogram without keeping every value. Not
 * thread-safe: one per task and measured series.
 */
final class LatencyHistogram {
  import LatencyHistogram._

  private val counts = new Array[Long](NumBuckets)
  private var total = 0L

  def record(micros: Long): Unit = {
    counts(index(math.max(0L, micros))) += 1
    total += 1
  }

  def count: Long = total

  /** Non-empty buckets as `[lowMicros, highMicros, count]` triples (high exclusive). */
  def buckets: Seq[(Long, Long, Long)] =
    counts.indices.filter(counts(_) > 0).map(i => (lowerBound(i), lowerBound(i + 1), counts(i)))
}

object LatencyHistogram {
  private val SubBits = 6
  private val Sub = 1 << SubBits
  private val MaxExponent = 40
  val NumBuckets: Int = Sub + (MaxExponent - SubBits + 1) * Sub

  def index(micros: Long): Int =
    if (micros < Sub) micros.toInt
    else {
      val exponent = 63 - java.lang.Long.numberOfLeadingZeros(micros)
      if (exponent > MaxExponent) NumBuckets - 1
      else Sub + (exponent - SubBits) * Sub + ((micros >> (exponent - SubBits)) - Sub).toInt
    }

  def lowerBound(index: Int): Long =
    if (index < Sub) index.toLong
    else {
      val shift = (index - Sub) / Sub
      val mantissa = Sub + (index - Sub) % Sub
      mantissa.toLong << shift
    }
}
