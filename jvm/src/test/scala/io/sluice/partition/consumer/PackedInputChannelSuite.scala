package io.sluice.partition.consumer

import io.sluice.{NettyLeakDetection, TestingThreads}
import io.sluice.netty.{
  PackedBufferResponse, PackedEntry, TestingExecutor, TestingGateReader, TestingRecords, TestingSilentServer
}
import io.sluice.netty.TestingExecutor.{async, await, withExecutors, withReaderAndProducer}
import io.sluice.partition.{PartitionNotFoundException, ProducerFailedException, ResultPartitionID, SortMergeResultPartition}
import org.scalatest.funsuite.AnyFunSuite

/**
 * One channel per producing executor: a regular gate reads every map output of one executor
 * through one packed remote channel (one MultiPartitionRequest, PackedBufferResponses carrying many
 * stored buffers and ends each), and its own executor's through one local channel. Producers on
 * A, the reader on B, 4 KiB segments; every test ends with every buffer back.
 */
class PackedInputChannelSuite extends AnyFunSuite with NettyLeakDetection {

  /** A finished blocking partition on `e` with `records(s)` records of `size(s)` bytes in subpartition s. */
  private def output(
      e: TestingExecutor, id: ResultPartitionID, records: Int => Int, size: Int => Int): SortMergeResultPartition = {
    val p = e.blockingPartition(id, 3, None)
    for (s <- 0 until 3) TestingRecords.writeMany(p, s, records(s), size(s))
    e.finish(p)
    p
  }

  /**
   * `n` map outputs on A, each with `records` records of `size` bytes in subpartition 0 (none in
   * the others), and a reader on B of every output's subpartition 0 that read the first two outputs
   * and paused.
   */
  private def pausedReader(a: TestingExecutor, b: TestingExecutor, id: Int => ResultPartitionID, n: Int, records: Int,
      size: Int): (IndexedSeq[SortMergeResultPartition], SingleInputGate, TestingGateReader) = {
    val outputs = (0 until n).map(i => output(a, id(i), s => if (s == 0) records else 0, _ => size))
    val gate = b.gate("reducer", outputs.map(p => GateInput(p.partitionId, 0, 1, a.location)))
    val reader = new TestingGateReader(gate)
    while (!gate.hasInputEnded(1)) assert(reader.readOne())
    (outputs, gate, reader)
  }

  /** A data entry of 10 bytes of input `input`. */
  private def data(input: Int): PackedEntry = PackedEntry(input, 0, isEnd = false, compressed = false,
    hasChecksum = false, rawLength = -1, crc = 0, length = 10, iv = null)

  /** Runs `body` with reader B and a server that upgrades B's connection and then never answers. */
  private def withSilentServer(body: (TestingExecutor, TestingSilentServer) => Unit): Unit = {
    val b = new TestingExecutor("B")
    val server = new TestingSilentServer
    try withExecutors(b) {
        body(b, server)
        b.awaitAllBuffersBack()
      }
    finally server.close()
  }

  /**
   * A packed, credit-based channel of `inputs` inputs on its own gate (2 exclusive buffers, a first
   * window of 4 floating ones, a pool of 30), requested from a silent server: the test hands it
   * frames as the event loop would ([[deliver]]) and reads them as its task ([[drain]]).
   */
  private final class HandFedChannel(b: TestingExecutor, server: TestingSilentServer, inputs: Int) {
    val gate = new SingleInputGate("hand-fed gate", b.networkBufferPool,
      b.networkBufferPool.createBufferPool(1, 30, "hand-fed gate"), None, 10000, 10000, initialFloatingCredit = 4)
    val channel = new RemoteInputChannel(gate, 0, (0 until inputs).map(i => ChannelInput(i, ResultPartitionID(40, i), 0, 1)),
      ProducerLocation("S", "127.0.0.1", server.port), p => b.connectionManager.createPartitionRequestClient(p.host, p.port),
      creditBased = true, 2, waitForProducer = false, 10000, packed = true)
    gate.setChannels(Array(channel))
    channel.requestSubpartitions()
    private var sequenceNumber = 0

    /** A frame of `entries` (their bytes zeros) with `backlog` stored buffers behind it, in a buffer of the channel's credit. */
    def deliver(entries: Seq[PackedEntry], backlog: Int): Unit = {
      val buffer = channel.requestBufferForData(null)
      entries.foreach(e => buffer.writeZero(e.length))
      channel.receivePacked(PackedBufferResponse(channel.id, sequenceNumber, backlog, entries.toIndexedSeq,
          entries.map(_.length).sum)(buffer))
      sequenceNumber += 1
    }

    /** Takes up to `max` entries as the task does, releasing each buffer; returns how many. */
    def drain(max: Int): Int = {
      var n = 0
      var next = if (max > 0) channel.getNextBuffer() else null
      while (next != null) {
        if (next.buffer != null) next.buffer.release()
        n += 1
        next = if (n < max) channel.getNextBuffer() else null
      }
      n
    }

    def close(): Unit = gate.close()
  }

  private def remoteChannel(gate: SingleInputGate): RemoteInputChannel =
    (0 until gate.numberOfChannels).map(gate.channel).collect { case r: RemoteInputChannel => r }.head

  test("one channel carries 60 map outputs of an executor: small ones packed, an empty one, an end per output, credit kept") {
    withReaderAndProducer() { (a, b) =>
      // Mostly one or two tiny records per output (far below a segment), output 7 has no record in
      // subpartition 1, and every tenth output spans several segments.
      def count(i: Int): Int = if (i == 7) 0 else if (i % 10 == 0) 40 else 1 + i % 2
      val outputs = (0 until 60).map(i => output(a, ResultPartitionID(20, i), s => if (s == 1) count(i) else 3, _ => 200))
      val stored = outputs.map(_.file.numBuffers(1)).sum
      val gate = b.gate("reducer 1", outputs.map(p => GateInput(p.partitionId, 1, 2, a.location)))
      assert(gate.numberOfChannels == 1 && gate.numberOfInputs == 60)
      val reader = new TestingGateReader(gate)
      val read = reader.readAll()
      assert(read == outputs.indices.filter(count(_) > 0).map(i => (i.toLong, 1) -> count(i)).toMap)
      assert((0 until 60).forall(gate.hasInputEnded), "every output's end arrived, the empty one's too")
      val ch = remoteChannel(gate)
      assert(ch.packed && ch.inputs.size == 60)
      assert(ch.numBuffersReceived < stored / 2, s"${ch.numBuffersReceived} frames for $stored stored buffers: small ones packed")
      assert(ch.numBuffersReceived <= ch.numCreditsAnnounced && ch.numCreditOverruns == 0)
      assert(ch.numCreditsAnnounced > 2, "the backlog brought floating credit beyond the two exclusive buffers")
      assert(gate.numPartitionRequests == 1 && gate.numChannelsRequested == 1)
      assert(gate.numControlMessages <= 4 + ch.numBuffersReceived,
        s"${gate.numControlMessages} control messages for ${ch.numBuffersReceived} frames")
      reader.close()
    }
  }

  test("local and remote map outputs: one local channel, one remote channel, exact records") {
    withReaderAndProducer() { (a, b) =>
      val remote = (0 until 25).map(i => output(a, ResultPartitionID(21, i), _ => 5, _ => 300))
      val local = (25 until 50).map(i => output(b, ResultPartitionID(21, i), _ => 5, _ => 300))
      val inputs = remote.map(p => GateInput(p.partitionId, 0, 3, a.location)) ++
        local.map(p => GateInput(p.partitionId, 0, 3, b.location))
      val gate = b.gate("reducer", inputs)
      val reader = new TestingGateReader(gate)
      assert(reader.readAll() == (for (i <- 0 until 50; s <- 0 until 3) yield (i.toLong, s) -> 5).toMap)
      assert(gate.numberOfChannels == 2 && gate.numPartitionRequests == 1)
      assert(gate.numBuffersInLocal.sum > 0 && gate.numBuffersInRemote.sum > 0)
      reader.close()
    }
  }

  test("a partition released after some outputs were read fails the channel; the blamed output is one not fully read") {
    withReaderAndProducer() { (a, b) =>
      // About 5 segments per output: the credit window cannot hold the whole stream.
      val (outputs, gate, reader) = pausedReader(a, b, ResultPartitionID(22, _), 12, records = 100, size = 200)
      a.partitionManager.releasePartition(outputs(9).partitionId, new RuntimeException("lost disk"))
      val e = intercept[InputChannelException](reader.readAll())
      assert(e.getCause.isInstanceOf[ProducerFailedException], e.toString)
      val blamed = gate.inputToBlame(e)
      assert(!gate.hasInputEnded(blamed) && gate.hasInputEnded(0), s"blamed input $blamed")
      reader.close()
    }
  }

  test("a map output's file cut short under a packed stream fails the channel alone; no frame goes out half-read") {
    withReaderAndProducer() { (a, b) =>
      // Two ~1 KB records per output: a 4 KiB frame packs a few outputs, so the frame holding
      // output 80 is read (several files into one buffer) long after the reader paused.
      val (outputs, gate, reader) = pausedReader(a, b, ResultPartitionID(25, _), 100, records = 2, size = 1000)
      val connection = b.clientChannelTo(a)
      val raf = new java.io.RandomAccessFile(outputs(80).file.path, "rw")
      try raf.setLength(0)
      finally raf.close()
      val e = intercept[InputChannelException](reader.readAll())
      assert(e.getMessage.contains(s"127.0.0.1:${a.port}") && e.getMessage.contains("Could not send"), e.getMessage)
      val blamed = gate.inputToBlame(e)
      assert(!gate.hasInputEnded(blamed) && blamed <= 80, s"blamed input $blamed")
      assert((80 until 100).forall(!gate.hasInputEnded(_)), "the stream stopped at the unreadable output")
      assert(reader.recordsRead.get < 200)
      assert(a.counters.unreadablePayloads.sum == 1 && a.counters.protocolErrors.sum == 0 && b.counters.protocolErrors.sum == 0)
      assert(connection.isActive && b.connectionManager.numClientConnections == 1, "the connection stayed up")
      reader.close()
    }
  }

  test("a missing map output fails the whole request, naming exactly that output and keeping the server's message") {
    withReaderAndProducer() { (a, b) =>
      val present = (0 until 3).map(i => output(a, ResultPartitionID(23, i), _ => 2, _ => 100))
      // A local input first (gate input 0), then the remote ones: the missing one is the gate's
      // input 2, the second of the remote channel's request.
      val local = output(b, ResultPartitionID(23, 50), _ => 2, _ => 100)
      val missing = ResultPartitionID(23, 99)
      val inputs = Vector(GateInput(local.partitionId, 0, 1, b.location), GateInput(present(0).partitionId, 0, 1, a.location),
        GateInput(missing, 0, 1, a.location)) ++ present.drop(1).map(p => GateInput(p.partitionId, 0, 1, a.location))
      val gate = b.gate("reducer", inputs)
      val reader = new TestingGateReader(gate)
      val e = intercept[InputChannelException](reader.readAll())
      val cause = e.getCause.asInstanceOf[PartitionNotFoundException]
      assert(cause.partitionId == missing && e.input == 2 && gate.inputToBlame(e) == 2, e.toString)
      assert(cause.getMessage.contains("input 1 of the request") && cause.getMessage.contains(s"127.0.0.1:${a.port}"),
        s"the server's message, naming the input of the request, reported by A: ${cause.getMessage}")
      reader.close()
      assert(a.counters.activeReaders.get == 0)
    }
  }

  test("a gate closed from another thread during its first read leaves no request behind") {
    withReaderAndProducer() { (a, b) =>
      val outputs = (0 until 4).map(i => output(a, ResultPartitionID(26, i), _ => 50, _ => 300))
      for (round <- 0 until 100) {
        val gate = b.gate(s"reducer $round", outputs.map(p => GateInput(p.partitionId, 0, 3, a.location)))
        val start = new java.util.concurrent.CountDownLatch(1)
        val reading = async {
          start.await()
          try { val next = gate.getNext(); if (next != null) next.buffer.release() }
          catch { case _: IllegalStateException | _: InputChannelException => () } // closed under it
        }
        val closing = async { start.await(); if (round % 3 == 0) Thread.`yield`(); gate.close() }
        start.countDown()
        await(reading); await(closing)
      }
      // A request sent after its Cancel would leave a reader on A forever, and its channel registered on B.
      TestingThreads.eventually(what = s"A's server released every reader (${a.counters.activeReaders.get} left)") {
        a.counters.activeReaders.get == 0
      }
      assert(b.connectionManager.clientFactory.connection("127.0.0.1", a.port).forall(_.numChannels == 0))
    }
  }

  test("a second end of an input, or data after its end, fails the channel instead of being counted") {
    withSilentServer { (b, server) =>
      for (late <- Seq(PackedEntry.end(0, 0), data(0))) {
        val h = new HandFedChannel(b, server, inputs = 2)
        h.deliver(Seq(data(0), PackedEntry.end(0, 0)), backlog = 1)
        h.deliver(Seq(data(1), late), backlog = 1)
        val e = intercept[InputChannelException](h.channel.getNextBuffer())
        val what = if (late.isEnd) "the end" else "data"
        assert(e.getCause.getMessage.contains(s"sent $what of input 0") && e.getMessage.contains("after that input's end"),
          e.getMessage)
        h.close()
      }
    }
  }

  test("a packed channel's credit window and queue count frames, not entries: it grows; 100 unread entries are one buffer") {
    withSilentServer { (b, server) =>
      val h = new HandFedChannel(b, server, inputs = 50)
      val ch = h.channel
      assert(ch.creditWindow == 6, "2 exclusive + 4 floating to start")
      def frame(k: Int) = (0 until 100).map(j => data((k + j) % 50))
      // The task reads each frame before the next arrives: the channel runs dry with a backlog behind.
      for (k <- 0 until 12) { h.deliver(frame(k), backlog = 1000); assert(h.drain(100) == 100) }
      val grown = ch.creditWindow
      assert(grown == 13 && ch.numCreditWindowGrowths == 2, s"6 -> 9 -> 13, not $grown")
      // Each frame now arrives while the one before waits unread: one receiving buffer, not 100 entries,
      // so the window holds, and the channel keeps credit for the backlog.
      h.deliver(frame(0), backlog = 1000)
      assert(ch.numQueuedBuffers == 1, "100 unread entries of one frame are one queued buffer (inputQueueLength)")
      for (k <- 1 to 12) {
        h.deliver(frame(k), backlog = 1000)
        assert(ch.numQueuedBuffers == 2, s"${ch.numQueuedBuffers} queued buffers for two unread frames")
        assert(ch.numAvailableBuffers >= ch.creditWindow - 2, s"${ch.numAvailableBuffers} free in a ${ch.creditWindow} window")
        assert(h.drain(100) == 100)
      }
      assert(ch.creditWindow == grown, s"the window shrank to ${ch.creditWindow}")
      h.drain(100)
      h.close()
    }
  }

  test("closing the gate mid-stream cancels the request: the server releases its reader, every buffer comes back") {
    withReaderAndProducer() { (a, b) =>
      val outputs = (0 until 20).map(i => output(a, ResultPartitionID(24, i), _ => 60, _ => 300))
      val gate = b.gate("reducer", outputs.map(p => GateInput(p.partitionId, 0, 3, a.location)))
      val reader = new TestingGateReader(gate)
      for (_ <- 0 until 50) assert(reader.readOne())
      assert(a.counters.activeReaders.get == 1)
      reader.close()
    }
  }
}
