package org.apache.spark.shuffle.sluice

import java.io.IOException
import java.util.Properties

import io.netty.buffer.{ByteBuf, Unpooled}
import io.sluice.NettyLeakDetection
import io.sluice.memory.NetworkBufferPool
import io.sluice.memory.TestingBufferPools._
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer._
import io.sluice.serialization.RecordFraming
import io.sluice.writer.SerializedRecord
import org.apache.spark.{FetchFailed, SparkConf, TaskContext, TaskContextImpl}
import org.apache.spark.executor.TaskMetrics
import org.apache.spark.serializer.JavaSerializer
import org.apache.spark.shuffle.FetchFailedException
import org.apache.spark.storage.BlockManagerId
import org.apache.spark.unsafe.Platform
import org.scalatest.funsuite.AnyFunSuite

/**
 * The reduce task's record reader over a gate of scripted channels: decode state is held for the
 * inputs being read, not for every map output; an input cut inside a record is a FetchFailed for
 * that map output; an error that is not about fetching (the reader's, this executor's, a server's
 * own) reaches the task as itself, so Spark retries the task and keeps the producer's outputs.
 */
class SluiceRecordIteratorSuite extends AnyFunSuite with NettyLeakDetection {
  import SluiceRecordIteratorSuite._

  private val serializer = new JavaSerializer(new SparkConf())

  private def context(): TaskContext =
    new TaskContextImpl(0, 0, 0, 1L, 0, 1, null, new Properties, null, TaskMetrics.empty, BigDecimal(1), Map.empty)

  /** A gate over `channels` scripted channels, reading inputs [0, numInputs) split evenly among them. */
  private def withReader[T](global: NetworkBufferPool, numInputs: Int, channels: Int)(
      script: Int => Script)(body: (SluiceRecordIterator, SparkRecordDecoder) => T): T = {
    val gate = new SingleInputGate("test reducer", global, global.createBufferPool(1, 4, "test floating buffers"), None,
      60000L, 60000L)
    val perChannel = numInputs / channels
    gate.setChannels(Array.tabulate[InputChannel](channels) { c =>
      val inputs = (c * perChannel until (c + 1) * perChannel).map(i => ChannelInput(i, ResultPartitionID(0, i), 0, 1))
      new ScriptedChannel(gate, c, inputs, script)
    })
    val outputs = (0 until numInputs).map { i =>
      MapOutput(BlockManagerId(s"exec-${i / perChannel}", "localhost", 7337), mapId = 1000L + i, mapIndex = i,
        startPartition = 0, endPartition = 1, pipelined = false)
    }
    val decoder = SparkRecordDecoder(serializer, numInputs)
    val ctx = context()
    val iterator = new SluiceRecordIterator(gate, outputs, 0, decoder, ctx, ctx.taskMetrics().createTempShuffleReadMetrics())
    try body(iterator, decoder)
    finally iterator.close()
  }

  test("a reduce over 2,000 inputs of spanning records holds decode state only for the inputs being read") {
    withNetworkBufferPool(16, 4096) { global =>
      val numInputs = 2000
      withReader(global, numInputs, channels = 2)(input => Script(records(input))) { (iterator, decoder) =>
        var count = 0
        var sum = 0L
        var peakLive = 0
        var peakStreams = 0
        while (iterator.hasNext) {
          val r = iterator.next()
          count += 1
          sum += r._1.asInstanceOf[Int]
          assert(r._2.asInstanceOf[Array[Byte]].length == RecordBytes)
          peakLive = math.max(peakLive, iterator.numLiveDeserializers)
          peakStreams = math.max(peakStreams, decoder.numLiveStreams)
        }
        assert(count == numInputs * RecordsPerInput, "every record was read")
        assert(sum == (0 until numInputs).map(_.toLong * RecordsPerInput).sum)
        assert(peakLive >= 1 && peakLive <= 2, s"$peakLive deserialisers held at once for 2 channels")
        assert(peakStreams >= 1 && peakStreams <= 2, s"$peakStreams streams held at once for 2 channels")
        assert(iterator.numLiveDeserializers == 0, "no deserialiser of an ended input is held")
        assert(decoder.numLiveStreams == 0, "no stream of an ended input is held")
        assert(iterator.numDeserializers <= 2, s"${iterator.numDeserializers} deserialisers made for 2 channels")
      }
    }
  }

  test("a record cut at an input's end is a FetchFailed naming that input's map output") {
    withNetworkBufferPool(16, 4096) { global =>
      val cut = 37
      withReader(global, 100, channels = 1) { input =>
        val bytes = records(input)
        Script(if (input == cut) bytes.take(bytes.length - 100) else bytes)
      } { (iterator, _) =>
        val e = intercept[FetchFailedException](iterator.foreach(_ => ()))
        val reason = e.toTaskFailedReason.asInstanceOf[FetchFailed]
        assert(reason.mapId == 1000L + cut && reason.mapIndex == cut, reason)
        assert(reason.bmAddress.executorId == "exec-0")
        assert(e.getMessage.contains(s"map output ${1000L + cut}") && e.getMessage.contains("ended inside a record"),
          e.getMessage)
      }
    }
  }

  for {
    (what, error) <- Seq[(String, () => Throwable)](
      "an OutOfMemoryError" -> (() => new OutOfMemoryError("Java heap space (test)")),
      "a bug in the reader" -> (() => new IllegalStateException("a bug (test)")),
      "this executor out of file descriptors" ->
        (() => new java.nio.file.FileSystemException("/spill", null, "Too many open files (test)")),
      "a server's own failure" -> (() =>
        new io.sluice.netty.ServerFailureException(io.sluice.netty.ErrorKind.ServerError, "127.0.0.1:7337",
          "channel 1", "java.lang.OutOfMemoryError: Direct buffer memory (test)")))
    how <- Seq(Thrown, Wrapped, SetError)
  } test(s"$what raised in a channel ($how) reaches the task as itself, not as a FetchFailed") {
    withNetworkBufferPool(16, 4096) { global =>
      val thrown = error()
      withReader(global, 4, channels = 2) { input =>
        Script(records(input), failWith = if (input == 3) thrown else null, how = how)
      } { (iterator, _) =>
        val e = intercept[Throwable](iterator.foreach(_ => ()))
        assert(e eq thrown, e)
      }
    }
  }

  test("an IOException raised in a channel is a FetchFailed for an input of that channel") {
    withNetworkBufferPool(16, 4096) { global =>
      withReader(global, 4, channels = 2)(input =>
        Script(records(input), failWith = if (input == 3) new IOException("disk gone (test)") else null)) {
        (iterator, _) =>
          val e = intercept[FetchFailedException](iterator.foreach(_ => ()))
          assert(e.toTaskFailedReason.asInstanceOf[FetchFailed].bmAddress.executorId == "exec-1")
          assert(e.getMessage.contains("disk gone (test)"), e.getMessage)
      }
    }
  }
}

object SluiceRecordIteratorSuite {
  val RecordsPerInput = 2
  val RecordBytes: Int = 40 * 1024
  val BufferBytes = 4096

  /**
   * What a channel delivers for one input: its framed bytes, cut into buffers; `failWith`
   * thrown instead of the input's first buffer.
   */
  final case class Script(bytes: Array[Byte], failWith: Throwable = null, how: String = Thrown)

  /** How a channel fails: throws from its read, throws it wrapped as a local channel's read does, or is failed from another thread. */
  val Thrown = "thrown"
  val Wrapped = "wrapped in an InputChannelException"
  val SetError = "set as the channel's error"

  /** Input `i`'s records as a map task writes them with Java serialization: (i, 40 KB), framed. */
  def records(input: Int): Array[Byte] = {
    val serializer = SparkRecordSerializer(new JavaSerializer(new SparkConf()), 1)
    val target = new SerializedRecord
    val out = new java.io.ByteArrayOutputStream()
    (0 until RecordsPerInput).foreach { seq =>
      serializer.serialize((input, Array.fill[Byte](RecordBytes)((input + seq).toByte)), 0, target)
      val payload = new Array[Byte](target.length)
      Platform.copyMemory(target.base, target.offset, payload, Platform.BYTE_ARRAY_OFFSET, target.length)
      out.write(java.nio.ByteBuffer.allocate(RecordFraming.HeaderSize).putInt(payload.length).array())
      out.write(payload)
    }
    out.toByteArray
  }

  /** A channel that reads its inputs one after another, each as its script says, then its end. */
  final class ScriptedChannel(gate: SingleInputGate, index: Int, inputs: IndexedSeq[ChannelInput], script: Int => Script)
    extends InputChannel(gate, index, inputs, ProducerLocation(s"exec-$index", "localhost", 7337)) {
    private var current = -1
    private var bytes: Array[Byte] = _
    private var position = 0

    override def requestSubpartitions(): Unit = notifyChannelNonEmpty()
    override def isRemote: Boolean = false
    override def releaseAllResources(): Unit = ()

    override def getNextBuffer(): BufferAndAvailability = {
      checkError()
      if (current >= inputs.size) return null
      if (bytes == null) {
        current += 1
        if (current == inputs.size) return null
        val s = script(inputs(current).index)
        if (s.failWith != null) s.how match {
          case Thrown => throw s.failWith
          case Wrapped => throw new InputChannelException(this, s.failWith, inputs(current).index)
          case SetError => setError(s.failWith); checkError()
        }
        bytes = s.bytes
        position = 0
      }
      val input = inputs(current).index
      if (position == bytes.length) {
        bytes = null
        return BufferAndAvailability.endOfPartition(input, 0, moreAvailable = current + 1 < inputs.size)
      }
      val n = math.min(BufferBytes, bytes.length - position)
      val buf: ByteBuf = Unpooled.directBuffer(n).writeBytes(bytes, position, n)
      position += n
      new BufferAndAvailability(input, buf, 0, compressed = false, rawLength = -1, hasChecksum = false, crc = 0,
        moreAvailable = true)
    }
  }
}
