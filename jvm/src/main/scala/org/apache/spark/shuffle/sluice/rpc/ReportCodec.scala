package org.apache.spark.shuffle.sluice.rpc

import java.io.{ByteArrayInputStream, ByteArrayOutputStream, DataInputStream, DataOutputStream, EOFException}

import io.sluice.NodeServiceAddress
import io.sluice.metrics._

/**
 * The binary form of what executors and the driver say every report interval over Spark's plugin
 * RPC: an executor's [[SluiceMessages.Report]] and the driver's [[SluiceMessages.ReportReply]].
 * Fields go in declaration order through `DataOutput` behind a tag byte, with no class descriptors
 * and no object per value; Java serialisation ([[RpcPayload]], kept for the rare messages) took
 * 2–8 times the driver's time per report (docs/benchmarks.md, "Simulated clusters"), once a second
 * per executor. Both ends run the same Sluice jar, so nothing is versioned beyond the tag.
 * Stateless and thread-safe.
 */
private[sluice] object ReportCodec {

  /** The first byte of an encoded report or reply (Java serialisation's is 0xAC). */
  private val ReportTag: Byte = 0x52 // 'R'
  private val ReplyTag: Byte = 0x72 // 'r'

  def encode(r: SluiceMessages.Report): Array[Byte] = write(ReportTag) { out =>
    writeSnapshot(out, r.snapshot)
    writeSeq(out, r.samples) { s =>
      out.writeLong(s.requestId)
      out.writeInt(s.stageId)
      out.writeUTF(s.executorId)
      writeSeq(out, s.tasks) { t =>
        writeKey(out, t.key)
        out.writeInt(t.blocked)
        out.writeInt(t.total)
      }
    }
    writeOption(out, r.server) { s =>
      out.writeUTF(s.executorId)
      out.writeUTF(s.host)
      out.writeInt(s.port)
    }
    writeOption(out, r.nodeService) { s =>
      out.writeUTF(s.host)
      out.writeInt(s.port)
    }
    writeSeq(out, r.partitionDirs)(out.writeUTF)
  }

  def encode(r: SluiceMessages.ReportReply): Array[Byte] = write(ReplyTag) { out =>
    writeSeq(out, r.requests) { s =>
      out.writeLong(s.requestId)
      out.writeInt(s.stageId)
      out.writeInt(s.numSamples)
      out.writeLong(s.delayBetweenSamplesMs)
    }
    writeSeq(out, r.servers) { s =>
      out.writeUTF(s.host)
      out.writeInt(s.port)
      out.writeBoolean(s.node)
    }
    writeSeq(out, r.hostLocal) { e =>
      out.writeUTF(e.executorId)
      writeSeq(out, e.dirs)(out.writeUTF)
    }
  }

  /**
   * The report or reply in `bytes`; an IllegalArgumentException saying what they are otherwise
   * (another message, or a truncated one).
   */
  def decode(bytes: Array[Byte]): AnyRef = {
    val in = new DataInputStream(new ByteArrayInputStream(bytes))
    val tag = if (bytes.isEmpty) 0.toByte else in.readByte()
    val message =
      try {
        tag match {
          case ReportTag => readReport(in)
          case ReplyTag => readReply(in)
          case other => throw new IllegalArgumentException(f"Not a Sluice report or reply: ${bytes.length} bytes " +
              f"starting with 0x${other & 0xff}%02x")
        }
      } catch {
        case e: EOFException =>
          throw new IllegalArgumentException(s"A Sluice report or reply cut short: ${bytes.length} bytes", e)
      }
    if (in.available() != 0) {
      throw new IllegalArgumentException(s"A Sluice report or reply with ${in.available()} bytes after its end")
    }
    message
  }

  private def readReport(in: DataInputStream): SluiceMessages.Report = {
    val snapshot = readSnapshot(in)
    val samples = readSeq(in) {
      val requestId = in.readLong()
      val stageId = in.readInt()
      val executorId = in.readUTF()
      StageSampleResult(requestId, stageId, executorId, readSeq(in)(TaskSample(readKey(in), in.readInt(), in.readInt())))
    }
    val server = readOption(in)(SluiceMessages.SluiceServer(in.readUTF(), in.readUTF(), in.readInt()))
    val nodeService = readOption(in)(NodeServiceAddress(in.readUTF(), in.readInt()))
    SluiceMessages.Report(snapshot, samples, server, nodeService, readSeq(in)(in.readUTF()))
  }

  private def readReply(in: DataInputStream): SluiceMessages.ReportReply = {
    val requests = readSeq(in)(SampleRequest(in.readLong(), in.readInt(), in.readInt(), in.readLong()))
    val servers = readSeq(in)(SluiceMessages.ReadServer(in.readUTF(), in.readInt(), in.readBoolean()))
    val hostLocal = readSeq(in)(SluiceMessages.ExecutorDirs(in.readUTF(), readSeq(in)(in.readUTF())))
    SluiceMessages.ReportReply(requests, servers, hostLocal)
  }

  private def writeSnapshot(out: DataOutputStream, s: ExecutorSnapshot): Unit = {
    out.writeUTF(s.executorId)
    out.writeLong(s.timestampMillis)
    out.writeInt(s.segments.segmentSize)
    out.writeInt(s.segments.total)
    out.writeInt(s.segments.available)
    out.writeInt(s.segments.used)
    writeSeq(out, s.tasks)(writeTask(out, _))
    writeMap(out, s.totals)(out.writeLong)
    writeMap(out, s.rates)(out.writeDouble)
    val t = s.transport
    out.writeInt(t.serverPort)
    out.writeInt(t.serverConnections)
    out.writeInt(t.clientConnections)
    out.writeInt(t.reads.threads)
    out.writeInt(t.reads.queueLength)
    out.writeLong(t.reads.waitTimeMs)
    out.writeInt(t.reads.totalSegments)
    out.writeInt(t.reads.usedSegments)
    out.writeInt(t.reads.fileDescriptors)
    out.writeLong(t.clientConnectionsOpened)
  }

  private def readSnapshot(in: DataInputStream): ExecutorSnapshot = {
    val executorId = in.readUTF()
    val timestamp = in.readLong()
    val segments = SegmentsSnapshot(in.readInt(), in.readInt(), in.readInt(), in.readInt())
    val tasks = readSeq(in)(readTask(in))
    val totals = readMap(in)(in.readLong())
    val rates = readMap(in)(in.readDouble())
    val serverPort = in.readInt()
    val serverConnections = in.readInt()
    val clientConnections = in.readInt()
    val reads = ServerReadSnapshot(in.readInt(), in.readInt(), in.readLong(), in.readInt(), in.readInt(), in.readInt())
    val transport = TransportSnapshot(serverPort, serverConnections, clientConnections, reads, in.readLong())
    ExecutorSnapshot(executorId, timestamp, segments, tasks, totals, rates, transport)
  }

  private def writeTask(out: DataOutputStream, t: TaskIOSnapshot): Unit = {
    writeKey(out, t.key)
    out.writeBoolean(t.running)
    out.writeLong(t.startedAtMillis)
    out.writeLong(t.timestampMillis)
    out.writeUTF(t.outputType)
    Seq(t.outPoolUsage, t.inPoolUsage, t.floatingBuffersUsage, t.exclusiveBuffersUsage).foreach(out.writeDouble)
    Seq(t.numRecordsOut, t.numRecordsIn, t.numBytesOut, t.numBytesIn, t.numBytesInLocal, t.numBytesInRemote,
      t.numBuffersOut, t.numBuffersInLocal, t.numBuffersInRemote).foreach(out.writeLong)
    Seq(t.numRecordsOutPerSecond, t.numRecordsInPerSecond, t.numBytesOutPerSecond, t.numBytesInPerSecond,
      t.numBytesInLocalPerSecond, t.numBytesInRemotePerSecond, t.numBuffersOutPerSecond, t.numBuffersInLocalPerSecond,
      t.numBuffersInRemotePerSecond).foreach(out.writeDouble)
    out.writeInt(t.outputQueueLength)
    out.writeInt(t.inputQueueLength)
    Seq(t.backPressuredTimeMsPerSecond, t.busyTimeMsPerSecond, t.idleTimeMsPerSecond).foreach(out.writeDouble)
    writeSeq(out, t.latency)(writeLatency(out, _))
    writeOption(out, t.latencyTotal)(writeLatency(out, _))
    writeOption(out, t.bufferTimeoutMs)(out.writeLong)
    Seq(t.numInputGates, t.numInputChannels, t.numPartitionRequests, t.numControlMessages).foreach(out.writeLong)
    Seq(t.numInputGatesPerSecond, t.numInputChannelsPerSecond, t.numPartitionRequestsPerSecond,
      t.numControlMessagesPerSecond).foreach(out.writeDouble)
    out.writeLong(t.bufferWaitMs)
    writeMap(out, t.inputWaitByProducerMs)(out.writeLong)
  }

  private def readTask(in: DataInputStream): TaskIOSnapshot = {
    val key = readKey(in)
    val running = in.readBoolean()
    val startedAt = in.readLong()
    val timestamp = in.readLong()
    val outputType = in.readUTF()
    val usages = Array.fill(4)(in.readDouble())
    val counters = Array.fill(9)(in.readLong())
    val rates = Array.fill(9)(in.readDouble())
    val outputQueueLength = in.readInt()
    val inputQueueLength = in.readInt()
    val times = Array.fill(3)(in.readDouble())
    val latency = readSeq(in)(readLatency(in))
    val latencyTotal = readOption(in)(readLatency(in))
    val bufferTimeoutMs = readOption(in)(in.readLong())
    val requests = Array.fill(4)(in.readLong())
    val requestRates = Array.fill(4)(in.readDouble())
    val bufferWaitMs = in.readLong()
    val inputWait = readMap(in)(in.readLong())
    TaskIOSnapshot(key, running, startedAt, timestamp, outputType, usages(0), usages(1), usages(2), usages(3),
      counters(0), counters(1), counters(2), counters(3), counters(4), counters(5), counters(6), counters(7),
      counters(8), rates(0), rates(1), rates(2), rates(3), rates(4), rates(5), rates(6), rates(7), rates(8),
      outputQueueLength, inputQueueLength, times(0), times(1), times(2), latency, latencyTotal, bufferTimeoutMs,
      requests(0), requests(1), requests(2), requests(3), requestRates(0), requestRates(1), requestRates(2),
      requestRates(3), bufferWaitMs, inputWait)
  }

  private def writeKey(out: DataOutputStream, k: TaskKey): Unit = {
    out.writeInt(k.stageId)
    out.writeInt(k.stageAttemptId)
    out.writeInt(k.partitionId)
    out.writeLong(k.taskAttemptId)
  }

  private def readKey(in: DataInputStream): TaskKey = TaskKey(in.readInt(), in.readInt(), in.readInt(), in.readLong())

  private def writeLatency(out: DataOutputStream, l: LatencySnapshot): Unit = {
    out.writeInt(l.sourceStage)
    out.writeInt(l.sourceIndex)
    out.writeLong(l.count)
    Seq(l.min, l.max, l.mean, l.p50, l.p95, l.p99, l.p999).foreach(out.writeDouble)
  }

  private def readLatency(in: DataInputStream): LatencySnapshot = {
    val sourceStage = in.readInt()
    val sourceIndex = in.readInt()
    val count = in.readLong()
    val d = Array.fill(7)(in.readDouble())
    LatencySnapshot(sourceStage, sourceIndex, count, d(0), d(1), d(2), d(3), d(4), d(5), d(6))
  }

  private def write(tag: Byte)(body: DataOutputStream => Unit): Array[Byte] = {
    val bytes = new ByteArrayOutputStream(1024)
    val out = new DataOutputStream(bytes)
    out.writeByte(tag)
    body(out)
    out.flush()
    bytes.toByteArray
  }

  private def writeSeq[T](out: DataOutputStream, items: Seq[T])(each: T => Unit): Unit = {
    out.writeInt(items.size)
    items.foreach(each)
  }

  private def readSeq[T](in: DataInputStream)(each: => T): Seq[T] = {
    List.fill(readCount(in, "list"))(each)
  }

  private def writeOption[T](out: DataOutputStream, item: Option[T])(each: T => Unit): Unit = {
    out.writeBoolean(item.isDefined)
    item.foreach(each)
  }

  private def readOption[T](in: DataInputStream)(each: => T): Option[T] = if (in.readBoolean()) Some(each) else None

  private def writeMap[V](out: DataOutputStream, map: Map[String, V])(each: V => Unit): Unit = {
    out.writeInt(map.size)
    map.foreach { case (k, v) => out.writeUTF(k); each(v) }
  }

  private def readMap[V](in: DataInputStream)(each: => V): Map[String, V] = {
    val n = readCount(in, "map")
    val b = Map.newBuilder[String, V]
    var i = 0
    while (i < n) { b += in.readUTF() -> each; i += 1 }
    b.result()
  }

  /** A list's or map's length: every item takes at least a byte, so more than the bytes left is corrupt. */
  private def readCount(in: DataInputStream, what: String): Int = {
    val n = in.readInt()
    if (n < 0 || n > in.available()) throw new IllegalArgumentException(s"A Sluice report or reply with a $what of $n")
    n
  }
}
