package io.sluice.partition

import java.util.concurrent.{LinkedBlockingQueue, RejectedExecutionException, ThreadPoolExecutor, TimeUnit}
import java.util.concurrent.atomic.{AtomicInteger, AtomicLong, LongAdder}

import io.sluice.memory.{BufferListener, NetworkBuffer, NetworkBufferPool}

/**
 * The server's reads of finished partition files for remote readers, and the memory they read into
 * (Flink's SortMergeResultPartitionReadScheduler with its I/O executor and batch-shuffle read
 * buffer pool, FLINK-19582, FLINK-19614): at most `numThreads` named daemon threads, started while
 * reads wait and ended after a minute without work, reading into `numBuffers` segments of
 * `segmentSize` bytes of the executor's network memory (spark.sluice.network.readMemory), each
 * held by a frame until the network took it.
 *
 * A reader submits one read at a time with the file position it starts at. Queued reads run in
 * rounds, each round in file and offset order, so a disk sees the readers of one file one after
 * another, and a read waits at most for the round before its own. A read runs only with a buffer
 * to read into: while every buffer waits to be sent, reads wait in the queue (backpressure), and
 * the first buffer back starts them again. [[shutdown]] drops the queued reads (their readers are
 * being released with their connections), lets running ones end, and ends every thread.
 * Thread-safe; the lock guards the queue and the worker count, never a read.
 */
final class PartitionReadScheduler(val numThreads: Int, name: String, val numBuffers: Int, segmentSize: Int) {
  require(numThreads > 0, s"a read scheduler of $numThreads threads")
  require(numBuffers > 0, s"a read scheduler of $numBuffers buffers")

  import PartitionReadScheduler.{Queued, Read}

  private val memory = new NetworkBufferPool(numBuffers, segmentSize)
  private val buffers = memory.createBufferPool(numBuffers, numBuffers, s"the Sluice server's read buffers ($name)")
  private val threadNumber = new AtomicInteger
  private val submitted = new AtomicLong
  private val waitNanos = new LongAdder
  private val fileReads = new LongAdder
  private val bytesRead = new LongAdder

  private val lock = new Object
  private val queue = new java.util.PriorityQueue[Queued]() // guarded by lock
  private var workers = 0 // submitted to the executor and not ended; guarded by lock
  private var listening = false // a listener waits for a buffer; guarded by lock
  private var shut = false // guarded by lock
  private var serving = 0L // the round of the read taken last: reads submitted now belong to the next one

  private val executor =
    new ThreadPoolExecutor(numThreads, numThreads, 60L, TimeUnit.SECONDS, new LinkedBlockingQueue[Runnable](),
      (r: Runnable) => {
        val t = new Thread(r, s"${PartitionReadScheduler.ThreadPrefix}$name-${threadNumber.incrementAndGet()}")
        t.setDaemon(true)
        t
      })
  executor.allowCoreThreadTimeOut(true)

  /** Told when a buffer comes back while reads wait for one (the thread that sent its frame). */
  private val listener = new BufferListener {
    override def notifyBufferAvailable(buffer: NetworkBuffer): Boolean = {
      lock.synchronized { listening = false }
      startWorker(buffer)
    }
    override def notifyBufferDestroyed(): Unit = lock.synchronized { listening = false }
  }

  /**
   * Runs `read` on a read thread when its turn comes and a buffer is free: after the reads of the
   * current round, in the order of (`shuffleId`, `producerId`, `offset`), the file position it
   * reads first. False when the scheduler was shut down.
   */
  def submit(read: Read, shuffleId: Int, producerId: Long, offset: Long): Boolean = {
    val start = lock.synchronized {
      if (shut) return false
      queue.add(new Queued(read, serving + 1, shuffleId, producerId, offset, submitted.incrementAndGet(), System.nanoTime()))
      // Without a free buffer a new worker would end at once: the listener starts one.
      val s = workers < numThreads && !listening
      if (s) workers += 1
      s
    }
    if (start) execute(new Worker(null))
    true
  }

  /** A worker with `buffer` (held for its first read), unless no read waits; whether it took it. */
  private def startWorker(buffer: NetworkBuffer): Boolean = {
    val start = lock.synchronized {
      val s = !shut && !queue.isEmpty
      if (s) workers += 1
      s
    }
    if (start) execute(new Worker(buffer))
    start
  }

  private def execute(w: Worker): Unit =
    try executor.execute(w)
    catch {
      case _: RejectedExecutionException => w.end() // shut down meanwhile
    }

  /** Leaves a listener for the next buffer back, unless one waits already or nothing is queued. */
  private def listenForBuffer(): Unit = {
    val register = lock.synchronized {
      val r = !listening && !shut && !queue.isEmpty
      if (r) listening = true
      r
    }
    if (register) {
      val b = buffers.requestBufferOrListen(listener)
      if (b != null) {
        lock.synchronized { listening = false } // one came back meanwhile
        if (!startWorker(b)) b.release()
      }
    }
  }

  /**
   * Takes queued reads while it has a buffer for them, each read getting the buffers it asks for
   * while they last (the first is the worker's); ends when the queue is empty or no buffer is free.
   */
  private final class Worker(private var held: NetworkBuffer) extends Runnable with PartitionReadScheduler.Buffers {
    private var ended = false

    override def take(): NetworkBuffer = {
      val b = held
      if (b != null) { held = null; b }
      else buffers.requestBuffer()
    }

    override def run(): Unit =
      try {
        while (!ended) {
          if (held == null) held = buffers.requestBuffer()
          if (held == null) {
            end()
            listenForBuffer()
          } else {
            var helper = false
            val q = lock.synchronized {
              val next = queue.poll()
              if (next == null) { workers -= 1; ended = true }
              else {
                if (next.round > serving) serving = next.round
                helper = !queue.isEmpty && workers < numThreads && !listening
                if (helper) workers += 1
              }
              next
            }
            if (helper) execute(new Worker(null))
            if (q != null) {
              waitNanos.add(System.nanoTime() - q.submittedNanos)
              q.read.run(this)
            }
          }
        }
      } finally {
        if (!ended) end() // a read threw: this worker is gone
        if (held != null) { held.release(); held = null }
      }

    def end(): Unit = if (!ended) {
      ended = true
      lock.synchronized(workers -= 1)
      if (held != null) { held.release(); held = null }
    }
  }

  /** A read thread read `bytes` bytes of a partition file in `calls` positional reads (metrics). */
  def recordFileReads(calls: Int, bytes: Long): Unit = { fileReads.add(calls.toLong); bytesRead.add(bytes) }

  /** Reads submitted since the start (each reads one or more frames). */
  def numSubmitted: Long = submitted.get

  /** Reads submitted and not started yet: waiting for a thread or a buffer (readQueueLength). */
  def numQueued: Int = lock.synchronized(queue.size)

  /** Milliseconds reads waited between their submission and their start, summed (readWaitTimeMs). */
  def waitTimeMs: Long = waitNanos.sum() / 1000000L

  /** Positional reads of partition files and the bytes they read. */
  def numFileReads: Long = fileReads.sum()
  def numBytesRead: Long = bytesRead.sum()

  /** Read buffers holding frames now: read and not yet sent. */
  def numBuffersInUse: Int = buffers.numUsedBuffers

  /** Threads reading now or waiting for work. */
  def numThreadsAlive: Int = executor.getPoolSize

  /** These figures under their metric names, with the `fileDescriptors` of the partition files its server keeps open. */
  def snapshot(fileDescriptors: Int): io.sluice.metrics.ServerReadSnapshot =
    io.sluice.metrics.ServerReadSnapshot(numThreadsAlive, numQueued, waitTimeMs, numBuffers, numBuffersInUse,
      fileDescriptors)

  /**
   * Takes no more reads, drops the queued ones and waits up to `timeoutMs` for the running ones to
   * end (a running read is not interrupted: that would close a file handle other readers share),
   * then interrupts what is left. The buffers go back to the network memory as the frames holding
   * them are sent or dropped. Whether every thread ended.
   */
  def shutdown(timeoutMs: Long): Boolean = {
    lock.synchronized { shut = true; queue.clear() }
    executor.shutdown()
    val ended = executor.awaitTermination(timeoutMs, TimeUnit.MILLISECONDS) || {
      executor.shutdownNow()
      executor.awaitTermination(timeoutMs, TimeUnit.MILLISECONDS)
    }
    buffers.lazyDestroy()
    memory.destroy()
    ended
  }
}

object PartitionReadScheduler {

  /** Every read thread's name starts with this. */
  val ThreadPrefix = "sluice-partition-read-"

  /** The threads of `configured` (spark.sluice.network.readThreads): 0 means the cores, at least 2, at most 32. */
  def threads(configured: Int): Int =
    if (configured > 0) configured else math.max(2, math.min(32, Runtime.getRuntime.availableProcessors()))

  /** A reader's read of its next frames, run on a read thread with the buffers it may fill. */
  trait Read {

    /** Reads; must not throw (a failure is its reader's, reported to it). */
    def run(buffers: Buffers): Unit
  }

  /** The read buffers a running read may take, one per frame. */
  trait Buffers {

    /**
     * A buffer of the server's read memory for the next frame, or null when none is free now: the
     * read then ends, and its reader submits its next read. A read's first call never answers
     * null. The frame releases it once sent (the buffer goes back to the scheduler).
     */
    def take(): NetworkBuffer
  }

  /** A read waiting its turn: by round, then file and offset, then submission. */
  private final class Queued(val read: Read, val round: Long, val shuffleId: Int, val producerId: Long,
      val offset: Long, val sequence: Long, val submittedNanos: Long) extends Comparable[Queued] {

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
