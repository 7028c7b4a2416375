package io.sluice.partition

import java.util.concurrent.{PriorityBlockingQueue, RejectedExecutionException, ThreadPoolExecutor, TimeUnit}
import java.util.concurrent.atomic.{AtomicInteger, AtomicLong}

/**
 * The executor's threads that read finished partition files for the server's remote readers
 * (Flink's SortMergeResultPartitionReadScheduler and the I/O executor it runs on, FLINK-19582): a
 * bounded pool of `numThreads` named daemon threads. A reader submits one read at a time, with the
 * file position it starts at; queued reads run in rounds, each round in file and offset order, so
 * a disk sees the readers of one file one after another, and a read waits at most for the round
 * before its own. Frames read ahead of their sending hold at most about `readAheadBytes`
 * ([[hasReadAheadRoom]]). Idle threads end after a minute; [[shutdown]] lets queued reads finish
 * (they find their readers released) and ends every thread. Thread-safe.
 */
final class PartitionReadScheduler(val numThreads: Int, name: String,
    val readAheadBytes: Long = PartitionReadScheduler.DefaultReadAheadBytes) {
  require(numThreads > 0, s"a read scheduler of $numThreads threads")

  import PartitionReadScheduler.Queued

  private val threadNumber = new AtomicInteger
  private val submitted = new AtomicLong

  /** The round of the read taken last: reads submitted now belong to the next one. */
  @volatile private var serving = 0L
  private val readAhead = new AtomicLong

  private val executor =
    new ThreadPoolExecutor(numThreads, numThreads, 60L, TimeUnit.SECONDS,
      new PriorityBlockingQueue[Runnable](64,
        (a: Runnable, b: Runnable) => a.asInstanceOf[Queued].compareTo(b.asInstanceOf[Queued])),
      (r: Runnable) => {
        val t = new Thread(r, s"${PartitionReadScheduler.ThreadPrefix}$name-${threadNumber.incrementAndGet()}")
        t.setDaemon(true)
        t
      }) {
      override protected def beforeExecute(t: Thread, r: Runnable): Unit = r match {
        case q: Queued => if (q.round > serving) serving = q.round
        case _ =>
      }
    }
  executor.allowCoreThreadTimeOut(true)

  /**
   * Runs `read` on a read thread when its turn comes: after the reads of the current round, in the
   * order of (`shuffleId`, `producerId`, `offset`), the file position it reads first. False when the
   * scheduler was shut down.
   */
  def submit(read: Runnable, shuffleId: Int, producerId: Long, offset: Long): Boolean =
    try {
      executor.execute(new Queued(read, serving + 1, shuffleId, producerId, offset, submitted.incrementAndGet()))
      true
    } catch { case _: RejectedExecutionException => false }

  /** Reads submitted since the start (each reads one or more frames). */
  def numSubmitted: Long = submitted.get

  /** Reads submitted and not started yet. */
  def numQueued: Int = executor.getQueue.size

  /** Whether frames read ahead of their sending hold less than `readAheadBytes` now. */
  def hasReadAheadRoom: Boolean = readAhead.get < readAheadBytes

  /** A frame of `bytes` was read ahead (read thread) or left the read-ahead (negative, event loop). */
  def addReadAhead(bytes: Long): Unit = readAhead.addAndGet(bytes)

  /** Bytes of frames read and not handed to the network yet. */
  def readAheadNow: Long = readAhead.get

  /**
   * Takes no more reads and waits up to `timeoutMs` for the queued and running ones to end (a
   * running read is not interrupted: that would close a file handle other readers share), then
   * interrupts what is left. Whether every thread ended.
   */
  def shutdown(timeoutMs: Long): Boolean = {
    executor.shutdown()
    executor.awaitTermination(timeoutMs, TimeUnit.MILLISECONDS) || {
      executor.shutdownNow()
      executor.awaitTermination(timeoutMs, TimeUnit.MILLISECONDS)
    }
  }
}

object PartitionReadScheduler {

  /** Every read thread's name starts with this. */
  val ThreadPrefix = "sluice-partition-read-"

  /** What frames read ahead may hold in all (Flink's batch-shuffle read memory defaults to 64 MiB). */
  val DefaultReadAheadBytes: Long = 64L << 20

  /** The threads of `configured` (spark.sluice.network.readThreads): 0 means the cores, at most 4. */
  def threads(configured: Int): Int =
    if (configured > 0) configured else math.min(4, Runtime.getRuntime.availableProcessors())

  /** A read waiting its turn: by round, then file and offset, then submission. */
  private final class Queued(read: Runnable, val round: Long, val shuffleId: Int, val producerId: Long,
      val offset: Long, val sequence: Long) extends Runnable with Comparable[Queued] {
    override def run(): Unit = read.run()

    override def compareTo(o: Queued): Int = {
      var c = java.lang.Long.compare(round, o.round)
      if (c == 0) c = Integer.compare(shuffleId, o.shuffleId)
      if (c == 0) c = java.lang.Long.compare(producerId, o.producerId)
      if (c == 0) c = java.lang.Long.compare(offset, o.offset)
      if (c == 0) c = java.lang.Long.compare(sequence, o.sequence)
      c
    }
  }
}
