package io.sluice.partition.consumer

import scala.collection.mutable

import io.sluice.buffer.BlockCodec
import io.sluice.memory.NetworkBufferPool
import io.sluice.partition.{ResultPartitionID, ResultPartitionManager, TestingElementReader}

/** Builds input gates of local channels and reads them to their end. */
object TestingInputGates {

  val Here: ProducerLocation = ProducerLocation("exec-1", "localhost", 7337)

  /** One local channel per (partition, subpartition range). */
  def localGate(
      global: NetworkBufferPool,
      manager: ResultPartitionManager,
      channels: Seq[(ResultPartitionID, Int, Int)],
      codec: Option[BlockCodec] = None,
      requestTimeoutMs: Long = 60000L,
      waitForProducer: Boolean = false,
      owner: String = "test consumer",
      needsReadBuffer: Boolean = false,
      maxChannelsInFlight: Int = SingleInputGate.AllAtOnce): SingleInputGate = {
    val floating = global.createBufferPool(1, 4, s"$owner floating buffers")
    val gate = new SingleInputGate(owner, global, floating, codec, requestTimeoutMs, 60000L, maxChannelsInFlight)
    gate.setChannels(channels.zipWithIndex.map { case ((id, start, end), i) =>
        new LocalInputChannel(gate, i, id, start, end, Here, manager, waitForProducer): InputChannel
      }.toArray, needsReadBuffer)
    gate
  }

  /**
   * Reads `gate` until it answers null, one deserialiser per input, releasing every buffer
   * before the next call. `onBuffer` sees the reader of each input after each buffer.
   */
  def readAll(
      gate: SingleInputGate, onBuffer: (Int, TestingElementReader) => Unit = (_, _) => ()): Map[Int, TestingElementReader] = {
    val readers = mutable.Map[Int, TestingElementReader]()
    var next = gate.getNext()
    while (next != null) {
      assert(!next.isRemote)
      val r = readers.getOrElseUpdate(next.input, new TestingElementReader)
      r.feed(next.buffer)
      onBuffer(next.input, r)
      next = gate.getNext()
    }
    readers.toMap
  }
}
