package io.sluice.partition.consumer

import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.LongAdder

import io.sluice.metrics.WaitTime

/**
 * The input metrics of one [[SingleInputGate]] (Flink's InputGateMetrics, and the counters Flink's
 * InputChannelMetrics keep per gate). numBytesIn counts the bytes of the buffers handed to the
 * task (decompressed: what the producers' numBytesOut counted), numBytesInLocal / numBytesInRemote
 * the bytes as they travelled from local / remote producers (compressed when stored compressed),
 * as Flink's gate and channel counters do. numBuffersInLocal counts the buffers local channels
 * handed over; numBuffersInRemote the frames remote channels received (one network buffer each,
 * which a packed frame fills with many map outputs' stored buffers). idleTimeNanos is the time the
 * task waited for input or for network memory (idleTime); the waits for input are also counted per
 * producing executor, by the channel that ended the wait (which peer the reader waited on).
 *
 * Written by the task thread (and by connections, for numBuffersInRemote); read from any thread.
 *
 * @param channels the gate's channels now, for the gauges over them
 */
final class InputGateMetrics(channels: () => Array[InputChannel]) {
  val numBytesIn = new LongAdder
  val numBytesInLocal = new LongAdder
  val numBytesInRemote = new LongAdder
  val numBuffersInLocal = new LongAdder
  val numBuffersInRemote = new LongAdder

  private val idle = new WaitTime

  /** Nanoseconds the task waited with no buffer ready (idleTime). */
  val idleTimeNanos: LongAdder = idle.nanos

  /** Runs `body`, a wait of the task for input or network memory, counting it as idle time. */
  def whileIdle[T](body: => T): T = idle.time(body)

  private val inputWaits = new ConcurrentHashMap[String, LongAdder]()

  /**
   * Runs `body`, the task's wait for a channel with data, counting it as idle time and as a wait
   * for the producing executor of the channel it returns (none when it returns null: every channel
   * ended).
   */
  def whileWaitingForInput(body: => InputChannel): InputChannel = {
    val start = System.nanoTime()
    val channel = idle.time(body)
    if (channel != null) {
      inputWaits.computeIfAbsent(channel.producer.executorId, _ => new LongAdder).add(System.nanoTime() - start)
    }
    channel
  }

  /** Nanoseconds the task waited for input, by the producing executor whose channel ended the wait. */
  def inputWaitNanosByProducer: Map[String, Long] = {
    val b = Map.newBuilder[String, Long]
    inputWaits.forEach((e, n) => b += e -> n.sum())
    b.result()
  }

  /** Idle nanoseconds so far, including a wait for input that has not ended yet. */
  def idleTimeNanosNow: Long = idle.nanosNow

  /** A buffer of `size` bytes as it travelled, `decoded` bytes for the task, went to the task. */
  def countBuffer(remote: Boolean, size: Int, decoded: Int): Unit = {
    if (remote) numBytesInRemote.add(size.toLong) // numBuffersInRemote counts frames, as they arrive
    else { numBytesInLocal.add(size.toLong); numBuffersInLocal.increment() }
    numBytesIn.add(decoded.toLong)
  }

  /** Buffers waiting in remote channels (inputQueueLength). */
  def inputQueueLength: Int = sumChannels(_.numQueuedBuffers)

  /** Exclusive buffers of the gate's remote channels (0 while every channel is local). */
  def numExclusiveBuffers: Int = sumChannels(_.numExclusiveBuffers)

  def numExclusiveBuffersUsed: Int = sumChannels(_.numExclusiveBuffersUsed)

  /** Floating buffers the channels took from the pool but have not filled (not "used" yet). */
  def numFloatingBuffersAvailable: Int = sumChannels(_.numFloatingBuffersAvailable)

  private def sumChannels(f: InputChannel => Int): Int = {
    val cs = channels()
    var s = 0
    var i = 0
    while (i < cs.length) { s += f(cs(i)); i += 1 }
    s
  }
}
