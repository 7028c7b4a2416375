package io.sluice.partition.consumer

import io.netty.buffer.Unpooled
import io.sluice.NettyLeakDetection
import io.sluice.config.SluiceOptions
import io.sluice.memory.InsufficientNetworkBuffersException
import io.sluice.netty.{BufferResponse, InputChannelID, TestingExecutor, TestingGateReader, TestingRecords}
import io.sluice.netty.TestingExecutor.{async, await, withExecutors}
import io.sluice.partition.{PartitionNotFoundException, ProducerFailedException, ResultPartitionID}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Remote input channels end to end: two executors on loopback, producers on A, gates on B.
 * Every test ends with every buffer of both executors back in its pool.
 */
class RemoteInputChannelSuite extends AnyFunSuite with NettyLeakDetection {

  private def remoteChannels(gate: SingleInputGate): Seq[RemoteInputChannel] =
    (0 until gate.numberOfChannels).map(gate.channel).collect { case r: RemoteInputChannel => r }

  test("a remote gate reads every record of pipelined partitions, credit never exceeded") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      val parts = (0 until 3).map(i => a.pipelinedPartition(ResultPartitionID(1, i), 2))
      val gates =
        (0 until 2).map(sub => b.gate(s"reader $sub", parts.map(p => GateInput(p.partitionId, sub, sub + 1, a.location))))
      val readers = gates.map(new TestingGateReader(_))
      val reading = readers.map(r => async(r.readAll()))
      val producing = parts.map { p =>
        async {
          for (i <- 0 until 1500; sub <- 0 until 2) {
            TestingRecords.write(p, sub, TestingRecords.record(p.partitionId.producerId, sub, i, 100 + (i % 7) * 150))
          }
          p.finish()
          p.awaitConsumed(30000)
        }
      }
      producing.foreach(await(_))
      val counts = reading.map(await(_))
      counts.zipWithIndex.foreach { case (c, sub) =>
        assert(c == parts.map(p => (p.partitionId.producerId, sub) -> 1500).toMap)
      }
      gates.foreach { g =>
        remoteChannels(g).foreach { ch =>
          assert(ch.numBuffersReceived > 0)
          assert(ch.numBuffersReceived <= ch.numCreditsAnnounced, s"$ch received more than its credit")
          assert(ch.numCreditOverruns == 0)
        }
      }
      readers.foreach(_.close())
      assert(a.partitionManager.numPartitions == 0, "consumed pipelined partitions release themselves")
      a.assertNoCreditViolations(); b.assertNoCreditViolations()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("the sender's backlog reaches the consumer: before its task reads, a channel receives on floating credit too") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      val p = a.pipelinedPartition(ResultPartitionID(2, 1), 1)
      val producing = async {
        TestingRecords.writeMany(p, 0, 400, 1000) // about 100 buffers of 4 KiB
        p.finish()
        p.awaitConsumed(30000)
      }
      val gate = b.gate("reader", Vector(GateInput(p.partitionId, 0, 1, a.location)))
      gate.requestPartitions() // requested, not read: only the credit the channel announced can arrive
      val ch = remoteChannels(gate).head
      val exclusive = b.conf.get(SluiceOptions.BuffersPerChannel)
      val floating = b.conf.get(SluiceOptions.FloatingBuffersPerGate)
      io.sluice.TestingThreads.eventually(what = s"the channel to receive its $exclusive exclusive and $floating " +
        s"floating buffers' worth (received ${ch.numBuffersReceived}, credit ${ch.numCreditsAnnounced})") {
        ch.numBuffersReceived == exclusive + floating
      }
      assert(gate.floatingBuffers.numUsedBuffers == floating, "the gate's whole floating pool holds received data")
      assert(!producing.isDone, "the producer waits for more credit")
      val reader = new TestingGateReader(gate)
      assert(reader.readAll() == Map((1L, 0) -> 400))
      await(producing)
      reader.close()
      a.assertNoCreditViolations(); b.assertNoCreditViolations()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("credit-less mode reads everything too, with no exclusive buffers") {
    val settings = Map(SluiceOptions.CreditBased.key -> "false")
    val a = new TestingExecutor("A", settings)
    val b = new TestingExecutor("B", settings)
    withExecutors(a, b) {
      val p = a.pipelinedPartition(ResultPartitionID(2, 0), 3)
      val gate = b.gate("reader", (0 until 3).map(s => GateInput(p.partitionId, s, s + 1, a.location)))
      remoteChannels(gate).foreach(ch => assert(ch.numAvailableBuffers == 0 && !ch.creditBased))
      val reader = new TestingGateReader(gate)
      val reading = async(reader.readAll())
      for (i <- 0 until 2000; s <- 0 until 3) TestingRecords.write(p, s, TestingRecords.record(0, s, i, 300))
      p.finish()
      assert(await(reading) == (0 until 3).map(s => (0L, s) -> 2000).toMap)
      reader.close()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a producer failure reaches the consumer as an InputChannelException naming partition and producer") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      val p = a.pipelinedPartition(ResultPartitionID(3, 7), 1)
      val reader = new TestingGateReader(b.gate("reader", Vector(GateInput(p.partitionId, 0, 1, a.location))))
      TestingRecords.writeMany(p, 0, 50, 200)
      p.flushAll()
      assert(reader.readOne())
      a.partitionManager.releasePartition(p.partitionId, new IllegalStateException("the producer broke"))
      p.closeBufferBuilders() // the producer's clean-up on its own thread
      val e = intercept[InputChannelException](while (reader.readOne()) ())
      assert(e.getMessage.contains("shuffle 3 producer 7"), e.getMessage)
      assert(e.getMessage.contains("executor A"), e.getMessage)
      assert(e.getCause.isInstanceOf[ProducerFailedException], e.getCause)
      assert(e.getCause.getMessage.contains("the producer broke"), e.getCause.getMessage)
      reader.close()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a partition the producer's executor does not have fails with PartitionNotFoundException") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      val reader = new TestingGateReader(b.gate("reader", Vector(GateInput(ResultPartitionID(4, 1), 0, 1, a.location))))
      val e = intercept[InputChannelException](reader.readOne())
      assert(e.getCause.isInstanceOf[PartitionNotFoundException])
      assert(e.getMessage.contains("shuffle 4 producer 1") && e.getMessage.contains("executor A"), e.getMessage)
      reader.close()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a request may wait for a pipelined producer that registers later") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      val id = ResultPartitionID(5, 0)
      val reader = new TestingGateReader(b.gate("reader", Vector(GateInput(id, 0, 1, a.location)), waitForProducers = true))
      val reading = async(reader.readAll())
      Thread.sleep(200)
      val p = a.pipelinedPartition(id, 1)
      TestingRecords.writeMany(p, 0, 500, 100)
      p.finish()
      assert(await(reading) == Map((0L, 0) -> 500))
      reader.close()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a consumer released mid-stream cancels its request; late data is dropped, every buffer comes back") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      val p = a.pipelinedPartition(ResultPartitionID(6, 0), 2)
      val stay = new TestingGateReader(b.gate("stays", Vector(GateInput(p.partitionId, 0, 1, a.location))))
      val leave = new TestingGateReader(b.gate("leaves", Vector(GateInput(p.partitionId, 1, 2, a.location))))
      val staying = async(stay.readAll())
      val producing = async {
        for (i <- 0 until 3000; s <- 0 until 2) TestingRecords.write(p, s, TestingRecords.record(0, s, i, 500))
        p.finish()
      }
      for (_ <- 0 until 100) assert(leave.readOne())
      leave.close()
      await(producing)
      assert(await(staying) == Map((0L, 0) -> 3000))
      stay.close()
      eventually(a.counters.activeReaders.get == 0, "the server released the cancelled reader")
      a.partitionManager.releasePartition(p.partitionId, null)
      a.assertNoCreditViolations(); b.assertNoCreditViolations()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a killed connection fails every channel on it, naming the remote executor and the partition") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      val parts = (0 until 2).map(i => a.pipelinedPartition(ResultPartitionID(7, i), 2))
      val gates = (0 until 2).map(s => b.gate(s"reader $s", parts.map(p => GateInput(p.partitionId, s, s + 1, a.location))))
      for (p <- parts; s <- 0 until 2) { TestingRecords.writeMany(p, s, 20, 100); p.flush(s) }
      val readers = gates.map(new TestingGateReader(_))
      readers.foreach(r => assert(r.readOne()))
      a.connectionManager.closeServerConnections()
      readers.foreach(r => intercept[InputChannelException](while (r.readOne()) ()))
      for (g <- gates; ch <- remoteChannels(g)) {
        val e = failureOf(ch)
        assert(e.getMessage.contains("executor A") && e.getMessage.contains(ch.partitionId.toString), e.getMessage)
        assert(e.getMessage.contains("connection"), e.getMessage)
      }
      readers.foreach(_.close())
      parts.foreach { p => a.partitionManager.releasePartition(p.partitionId, null); p.closeBufferBuilders() }
      // The next gate opens a new connection.
      val p2 = a.pipelinedPartition(ResultPartitionID(8, 0), 1)
      val again = new TestingGateReader(b.gate("again", Vector(GateInput(p2.partitionId, 0, 1, a.location))))
      TestingRecords.writeMany(p2, 0, 10, 100)
      p2.finish()
      assert(again.readAll() == Map((0L, 0) -> 10))
      again.close()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a gap in the sequence numbers fails the channel and releases the buffer") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      val p = a.pipelinedPartition(ResultPartitionID(9, 0), 1)
      val gate = b.gate("reader", Vector(GateInput(p.partitionId, 0, 1, a.location)))
      gate.requestPartitions()
      val ch = remoteChannels(gate).head
      val buffer = ch.requestBufferForData(null)
      buffer.writeBytes(Unpooled.wrappedBuffer(TestingRecords.record(0, 0, 0, 64)))
      ch.onBuffer(BufferResponse(ch.id, 5, 0, 0, buffer))
      assert(buffer.refCnt() == 0, "the out-of-order buffer was released")
      val e = intercept[InputChannelException](gate.getNext())
      assert(e.getMessage.contains("buffer number 5") && e.getMessage.contains("expected number 0"), e.getMessage)
      gate.close()
      a.partitionManager.releasePartition(p.partitionId, null)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a gate is created without network memory for its channels; a channel that can never get its " +
    "exclusive buffers fails the first read at once, naming spark.sluice.network.memory") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B", Map(SluiceOptions.BuffersPerChannel.key -> "16"), numSegments = 8)
    withExecutors(a, b) {
      for (pipelined <- Seq(false, true)) {
        val gate = b.gate("greedy", (0 until 10).map(s => GateInput(ResultPartitionID(10, 0), s, s + 1, a.location)),
          waitForProducers = pipelined)
        assert(b.networkBufferPool.numberOfRequiredSegments == 1, "only the floating pool's minimum")
        val e = intercept[InsufficientNetworkBuffersException](gate.getNext())
        assert(e.getMessage.contains("spark.sluice.network.memory") && e.getMessage.contains("greedy"), e.getMessage)
        assert(e.getMessage.contains("buffersPerChannel"), e.getMessage)
        assert(gate.numChannelsRequested == 0)
        gate.close()
      }
      assert(a.counters.activeReaders.get == 0, "no request was sent")
      b.awaitAllBuffersBack()
    }
  }

  test("a producer that never answers fails a remote channel it waited for after the request timeout, naming it") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B", Map(SluiceOptions.RequestTimeout.key -> "300ms"))
    withExecutors(a, b) {
      val quietRemote = a.pipelinedPartition(ResultPartitionID(16, 3), 1)
      val quietLocal = b.pipelinedPartition(ResultPartitionID(16, 4), 1)
      val gate = b.gate("stuck",
        Vector(GateInput(quietLocal.partitionId, 0, 1, b.location),
          GateInput(quietRemote.partitionId, 0, 1, a.location)))
      val e = intercept[InputChannelException](gate.getNext())
      assert(e.channel.channelIndex == 1 && e.channel.isRemote, "the remote channel is the one failed")
      assert(e.getCause.isInstanceOf[java.util.concurrent.TimeoutException], e.getCause)
      assert(e.getMessage.contains("spark.sluice.network.requestTimeout"), e.getMessage)
      assert(e.getMessage.contains("shuffle 16 producer 3") && e.getMessage.contains("executor A"), e.getMessage)
      assert(e.getMessage.contains("shuffle 16 producer 4"), "the message names every channel waited for")
      gate.close()
      Seq(quietRemote, quietLocal).foreach(_.closeBufferBuilders())
      a.partitionManager.releasePartition(quietRemote.partitionId, null)
      b.partitionManager.releasePartition(quietLocal.partitionId, null)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a task interrupted while its gate waits for data or for network memory throws InterruptedException; " +
    "close gives every buffer back") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B", numSegments = 12)
    withExecutors(a, b) {
      val quiet = a.pipelinedPartition(ResultPartitionID(17, 0), 2)
      // Waiting for data, its channels requested and holding their exclusive buffers.
      val waiting = b.gate("waits for data", (0 until 2).map(s => GateInput(quiet.partitionId, s, s + 1, a.location)))
      val reader = io.sluice.TestingThreads.fork("reader")(waiting.getNext())
      reader.awaitWaiting()
      io.sluice.TestingThreads.eventually(what = "the channels to be requested")(waiting.numExclusiveSegmentsHeld == 4)
      reader.thread.interrupt()
      assert(reader.failure().isInstanceOf[InterruptedException], reader.failure())
      waiting.close()
      // Waiting for exclusive buffers another pool holds.
      val other = b.networkBufferPool.createBufferPool(11, 11, "another task")
      val starved = b.gate("waits for memory", Vector(GateInput(quiet.partitionId, 0, 1, a.location)))
      val starvedReader = io.sluice.TestingThreads.fork("starved reader")(starved.getNext())
      io.sluice.TestingThreads.eventually(what = "the gate to wait for memory")(starved.idleTimeNanosNow > 0)
      starvedReader.awaitWaiting()
      starvedReader.thread.interrupt()
      assert(starvedReader.failure().isInstanceOf[InterruptedException], starvedReader.failure())
      assert(b.networkBufferPool.numberOfRequiredSegments == 12, "the interrupted request reserved nothing")
      starved.close()
      other.lazyDestroy()
      quiet.closeBufferBuilders()
      a.partitionManager.releasePartition(quiet.partitionId, null)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("closing a gate from another thread wakes its waiting task") {
    val a = new TestingExecutor("A")
    val b = new TestingExecutor("B")
    withExecutors(a, b) {
      val quiet = a.pipelinedPartition(ResultPartitionID(18, 0), 1)
      val gate = b.gate("killed", Vector(GateInput(quiet.partitionId, 0, 1, a.location)))
      val reader = io.sluice.TestingThreads.fork("reader")(gate.getNext())
      reader.awaitWaiting()
      gate.close()
      val e = reader.failure()
      assert(e.isInstanceOf[IllegalStateException] && e.getMessage.contains("closed"), e)
      quiet.closeBufferBuilders()
      a.partitionManager.releasePartition(quiet.partitionId, null)
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a credit-less channel of a closing gate gets no buffer for arriving data, and no error") {
    val r = new io.sluice.netty.TestingReceivers(creditBased = false)
    try {
      val listener = new io.sluice.memory.TestingBufferListener
      val ch = r.channels.head
      val first = ch.requestBufferForData(listener)
      assert(first != null, "the gate's pool has buffers")
      first.release()
      r.gate.floatingBuffers.lazyDestroy() // the gate is closing; the connection has not seen it yet
      assert(ch.requestBufferForData(listener) == null)
      assert(listener.received.get == 0 && listener.destroyed.get == 0, "nothing waits on the destroyed pool")
    } finally {
      r.close()
      assert(r.networkBufferPool.numberOfAvailableSegments == 64)
      r.networkBufferPool.destroy()
    }
  }

  /** The error a channel reports once it failed (the connection fails its channels one after another). */
  private def failureOf(ch: RemoteInputChannel, timeoutMs: Long = 10000): InputChannelException = {
    val deadline = System.currentTimeMillis() + timeoutMs
    while (System.currentTimeMillis() < deadline) {
      try {
        val next = ch.getNextBuffer()
        if (next != null && next.buffer != null) next.buffer.release()
        if (next == null) Thread.sleep(5)
      } catch { case e: InputChannelException => return e }
    }
    fail(s"$ch did not fail")
  }

  private def eventually(condition: => Boolean, what: String, timeoutMs: Long = 10000): Unit = {
    val deadline = System.currentTimeMillis() + timeoutMs
    while (!condition && System.currentTimeMillis() < deadline) Thread.sleep(10)
    assert(condition, what)
  }

}
