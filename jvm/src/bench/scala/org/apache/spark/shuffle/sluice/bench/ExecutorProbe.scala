package org.apache.spark.shuffle.sluice.bench

import java.lang.management.{BufferPoolMXBean, ManagementFactory}
import java.util.concurrent.atomic.AtomicLong

import scala.jdk.CollectionConverters._

import org.apache.spark.SparkEnv
import org.apache.spark.api.java.JavaSparkContext
import org.apache.spark.shuffle.sluice.SluiceEnvironment

/**
 * What `sluice bench memory` and `sluice bench scale` read from each executor JVM: its process id,
 * Sluice server port (-1 in an application of Spark's own shuffle) and block manager port (the
 * port Spark's shuffle serves blocks on), and its network memory: Flink's Total/Used memory segments, the
 * segments the NetworkBufferPool ever allocated (its real high-water mark, since segments are
 * kept for reuse), and the peak of the used segments and of the JVM's and Netty's direct memory, sampled
 * every millisecond by a daemon thread started by the first probe. Thread-safe.
 */
object ExecutorProbe {

  private val peakUsedSegments = new AtomicLong
  private val peakDirectBytes = new AtomicLong
  private val peakNettyBytes = new AtomicLong

  private lazy val directPool: Option[BufferPoolMXBean] =
    ManagementFactory.getPlatformMXBeans(classOf[BufferPoolMXBean]).asScala.find(_.getName == "direct")

  private def directBytes: Long = directPool.map(_.getMemoryUsed).getOrElse(0L)

  /** What Netty allocated off-heap without the JDK's accounting (-1 when Netty does not count it). */
  private def nettyBytes: Long = io.netty.util.internal.PlatformDependent.usedDirectMemory()

  private lazy val sampler: Thread = {
    val t = new Thread(
      () => {
        while (true) {
          SluiceEnvironment.ifStarted.foreach(e =>
            peakUsedSegments.accumulateAndGet(
              e.networkBufferPool.numberOfUsedSegments.toLong, math.max))
          peakDirectBytes.accumulateAndGet(directBytes, math.max)
          peakNettyBytes.accumulateAndGet(nettyBytes, math.max)
          Thread.sleep(1)
        }
      }, "sluice-bench-memory-sampler")
    t.setDaemon(true)
    t.start()
    t
  }

  /** This executor's figures as a JSON object; `reset` restarts the sampled peaks afterwards. */
  def local(reset: Boolean): String = {
    sampler
    val env = SluiceEnvironment.ifStarted
    val pool = env.map(_.networkBufferPool)
    val fields = Seq(
      "executor_id" -> ("\"" + SparkEnv.get.executorId + "\""),
      "pid" -> ProcessHandle.current().pid().toString,
      "sluice_port" -> env.map(_.serverPort).getOrElse(-1).toString,
      "block_manager_port" -> SparkEnv.get.blockManager.blockManagerId.port.toString,
      "segment_size" -> pool.map(_.segmentSize).getOrElse(0).toString,
      "total_segments" -> pool.map(_.totalSegments).getOrElse(0).toString,
      "used_segments" -> pool.map(_.numberOfUsedSegments).getOrElse(0).toString,
      "allocated_segments" -> pool.map(_.numberOfAllocatedSegments).getOrElse(0).toString,
      "peak_used_segments" -> peakUsedSegments.get.toString,
      "direct_bytes" -> directBytes.toString,
      "peak_direct_bytes" -> peakDirectBytes.get.toString,
      "netty_direct_bytes" -> nettyBytes.toString,
      "peak_netty_direct_bytes" -> peakNettyBytes.get.toString)
    if (reset) {
      peakUsedSegments.set(pool.map(_.numberOfUsedSegments.toLong).getOrElse(0L))
      peakDirectBytes.set(directBytes)
      peakNettyBytes.set(nettyBytes)
    }
    fields.map { case (k, v) => "\"" + k + "\":" + v }.mkString("{", ",", "}")
  }

  /**
   * [[local]] of every executor, as a JSON array: runs small jobs until each executor has run one
   * of their tasks (at most `attempts` jobs). Called from Python through py4j.
   */
  def collect(jsc: JavaSparkContext, reset: Boolean, attempts: Int): String = {
    val sc = jsc.sc
    val executors = math.max(1, sc.statusTracker.getExecutorInfos.length - 1)
    val seen = scala.collection.mutable.LinkedHashMap.empty[String, String]
    var attempt = 0
    while (seen.size < executors && attempt < attempts) {
      attempt += 1
      val tasks = 4 * executors
      val found = sc.parallelize(0 until tasks, tasks).map { _ =>
        Thread.sleep(50)
        (SparkEnv.get.executorId, local(reset))
      }.collect()
      found.foreach { case (id, json) => if (!seen.contains(id)) seen(id) = json }
    }
    seen.values.mkString("[", ",", "]")
  }
}
