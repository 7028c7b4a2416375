package org.apache.spark.shuffle.sluice.bench

import java.io.File
import java.nio.ByteBuffer
import java.util.concurrent.{ExecutorService, Executors, Future, TimeUnit}
import java.util.concurrent.atomic.{AtomicInteger, AtomicLong}

import io.sluice.{ShuffleEnvironment, TransportSettings}
import io.sluice.config.SluiceConf
import io.sluice.partition.{ResultPartitionID, SortMergeResultPartition}
import io.sluice.partition.consumer.{GateInput, ProducerLocation}
import io.sluice.serialization.{RecordView, SpanningRecordDeserializer}
import org.apache.spark.unsafe.Platform

/**
 * One executor of a [[SimulatedCluster]]: a production [[ShuffleEnvironment]] (its own
 * NetworkBufferPool, ResultPartitionManager, Netty server on loopback, local dir) built through its
 * public constructor, and `slots` task threads. Every thread the executor starts (event loops, read
 * threads, connector threads, the output flusher, its task threads) belongs to its ThreadGroup, so
 * its threads can be counted in a JVM shared with other executors. Map tasks write, finish and
 * register their partitions as SluiceShuffleWriter does; reduce tasks read through an input gate as
 * SluiceShuffleReader does. Thread-safe.
 */
final class SimulatedExecutor private (val id: String, val group: ThreadGroup, val dir: File, slots: Int,
    conf: SluiceConf, transport: TransportSettings) {

  private val taskThreads = new AtomicInteger
  private val tasks: ExecutorService = Executors.newFixedThreadPool(slots,
    (r: Runnable) => {
      val t = new Thread(group, r, s"${SimulatedExecutor.TaskThreadPrefix}$id-${taskThreads.incrementAndGet()}")
      t.setDaemon(true)
      t
    })

  /** The executor's network stack, created on one of its own threads (so its threads join its group). */
  val env: ShuffleEnvironment =
    try run(new ShuffleEnvironment(conf, id, Seq(dir), None, transport)).get(SimulatedExecutor.StartTimeoutMs,
        TimeUnit.MILLISECONDS)
    catch { case e: Throwable => tasks.shutdownNow(); throw e }

  def location: ProducerLocation = ProducerLocation(id, transport.bindHost, env.serverPort)

  /** Runs `body` on one of the executor's task threads. */
  def run[T](body: => T): Future[T] = tasks.submit(new java.util.concurrent.Callable[T] { override def call(): T = body })

  // Figures of the tasks that ran here.
  private val peakGateSegments = new AtomicLong
  private val readFromTotal = new AtomicLong
  private val readFromPrepared = new AtomicLong
  private val mapsRun = new AtomicInteger
  private val reducersRun = new AtomicInteger
  private val recordsRead = new AtomicLong

  /**
   * A map task as SluiceShuffleWriter runs it: writes `recordsPerBlock` records of `recordSize`
   * bytes for every reducer into a blocking partition, finishes it, reads its sizes (what MapStatus
   * reports) and registers it. Returns the stored bytes per reducer.
   */
  def runMap(shuffleId: Int, mapId: Long, numReducers: Int, recordsPerBlock: Int, recordSize: Int): Array[Long] = {
    val p = env.createBlockingPartition(ResultPartitionID(shuffleId, mapId), numReducers)
    var done = false
    try {
      val record = new Array[Byte](recordSize)
      val b = ByteBuffer.wrap(record)
      var i = 0
      while (i < recordsPerBlock) {
        var r = 0
        while (r < numReducers) {
          b.putLong(0, mapId).putInt(8, r).putInt(12, i)
          p.emitRecord(r, record, Platform.BYTE_ARRAY_OFFSET, recordSize)
          r += 1
        }
        i += 1
      }
      p.finish()
      val sizes = p.subpartitionSizes
      env.registerPartition(p)
      done = true
      mapsRun.incrementAndGet()
      sizes
    } finally if (!done) {
        val cause = new IllegalStateException(s"map $mapId of shuffle $shuffleId failed")
        env.partitionManager.releasePartition(p.partitionId, cause)
        p.release(cause)
        p.closeBufferBuilders()
      }
  }

  /**
   * A reduce task as SluiceShuffleReader runs it: one gate over reduce partition `reducer` of every
   * map output (`inputs`, grouped by executor), read to its end with a deserialiser per input.
   * Counts whether each executor it reads from already had a connection from this one when the gate
   * was created (a prepared one), and the gate's peak network buffers. Returns the records read per
   * map output; fails when a record names another reducer or is out of order.
   */
  def runReduce(shuffleId: Int, reducer: Int, inputs: IndexedSeq[GateInput]): Map[Long, Int] = {
    val remote = inputs.map(_.producer).filter(_.executorId != id).distinct
    readFromTotal.addAndGet(remote.size)
    readFromPrepared.addAndGet(remote.count(p =>
        env.connectionManager.clientFactory.connection(p.host, p.port).exists(_.isActive)))
    val gate = env.createInputGate(s"shuffle $shuffleId reducer $reducer", inputs, waitForProducers = false)
    val counts = new Array[Int](inputs.size)
    try {
      val deserializers = new Array[SpanningRecordDeserializer](inputs.size)
      val view = new RecordView
      var peak = 0L
      var next = gate.getNext()
      while (next != null) {
        val held = gate.numExclusiveSegmentsHeld.toLong + gate.floatingBuffers.numRequestedSegments
        if (held > peak) peak = held
        val in = next.input
        if (deserializers(in) == null) deserializers(in) = new SpanningRecordDeserializer
        val d = deserializers(in)
        d.setNextBuffer(next.buffer)
        var kind = d.readNext(view)
        while (kind != SpanningRecordDeserializer.NeedMoreData) {
          if (kind == SpanningRecordDeserializer.Record) {
            val mapId = Platform.getLong(view.base, view.offset)
            val r = Integer.reverseBytes(Platform.getInt(view.base, view.offset + 8))
            val seq = Integer.reverseBytes(Platform.getInt(view.base, view.offset + 12))
            val expected = inputs(in).partitionId.producerId
            if (java.lang.Long.reverseBytes(mapId) != expected || r != reducer || seq != counts(in)) {
              throw new IllegalStateException(s"reducer $reducer read record $seq of map ${java.lang.Long.reverseBytes(mapId)} " +
                s"for reducer $r from input $in (map $expected, record ${counts(in)} expected)")
            }
            counts(in) += 1
          }
          kind = d.readNext(view)
        }
        next.buffer.release()
        next = gate.getNext()
      }
      deserializers.foreach(d => if (d != null) d.release())
      peakGateSegments.accumulateAndGet(peak, math.max)
      reducersRun.incrementAndGet()
      recordsRead.addAndGet(counts.map(_.toLong).sum)
      inputs.indices.map(i => inputs(i).partitionId.producerId -> counts(i)).toMap
    } finally gate.close()
  }

  /** What the executor's tasks saw: maps, reducers, records read, peak gate buffers, executors read from and prepared. */
  def taskFigures: SimulatedExecutor.TaskFigures = SimulatedExecutor.TaskFigures(mapsRun.get, reducersRun.get,
    recordsRead.get, peakGateSegments.get, readFromTotal.get, readFromPrepared.get)

  /** Live threads of this executor, its task threads excepted. */
  def threads: Seq[Thread] = {
    val all = new Array[Thread](group.activeCount() * 2 + 16)
    val n = group.enumerate(all, true)
    all.take(n).toSeq.filterNot(_.getName.startsWith(SimulatedExecutor.TaskThreadPrefix))
  }

  /** Stops the task threads and the network stack; the local dir is the cluster's to delete. */
  def shutdown(): Unit =
    try {
      tasks.shutdownNow()
      tasks.awaitTermination(10, TimeUnit.SECONDS)
    } finally env.shutdown()
}

object SimulatedExecutor {

  val TaskThreadPrefix = "simulated-task-"
  private val StartTimeoutMs = 120000L

  /** Starts executor `id` with its threads in a group of their own and its local dir `dir`. */
  def start(id: String, dir: File, slots: Int, conf: SluiceConf, transport: TransportSettings): SimulatedExecutor =
    new SimulatedExecutor(id, new ThreadGroup(s"simulated-executor-$id"), dir, slots, conf, transport)

  /**
   * What one executor's tasks saw: maps written, reducers run, records read, the most network
   * buffers one of its gates held at once, and of the executors its reducers read from (counted
   * per reducer), those it already had a connection to when the reducer's gate was created.
   */
  final case class TaskFigures(maps: Int, reducers: Int, records: Long, peakGateSegments: Long, readFrom: Long,
      readFromPrepared: Long)
}
