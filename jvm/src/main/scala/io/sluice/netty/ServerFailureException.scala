package io.sluice.netty

/**
 * A remote Sluice server could not serve a channel for a reason of its own, its data intact: an
 * internal error, out of memory or of file descriptors ([[ErrorKind.ServerError]]), or a refusal
 * of a peer limit ([[ErrorKind.Refused]]). Not an IOException: the gate throws it as itself, so the
 * reduce task fails and Spark retries it (spark.task.maxFailures) without declaring the producer
 * lost, as for any task failure; a FetchFailed would make Spark recompute every map output of a
 * healthy executor, and the recomputation would meet the same limit.
 */
final class ServerFailureException(val kind: ErrorKind, server: String, what: String, reason: String)
  extends RuntimeException(s"The Sluice server at $server could not serve $what ($kind): $reason. Its map outputs " +
    "are not lost: the task fails and Spark retries it")
