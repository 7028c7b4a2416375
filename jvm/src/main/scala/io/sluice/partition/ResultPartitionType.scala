package io.sluice.partition

/** The two output types of "A Deep-Dive into Flink's Network Stack": consumed while produced, or only once complete. */
sealed abstract class ResultPartitionType(val name: String) {
  override def toString: String = name
}

object ResultPartitionType {

  /** Consumed while it is produced, in memory, exactly once (streaming; Spark's Real-Time Mode). */
  case object Pipelined extends ResultPartitionType("pipelined")

  /**
   * Consumed once complete, as often and by as many readers as needed until released (batch;
   * Spark's regular shuffles). Held on disk in Spark's local dirs once its producer finished.
   */
  case object Blocking extends ResultPartitionType("blocking")
}
