package io.sluice.partition.consumer

import java.io.RandomAccessFile
import java.util.concurrent.{CountDownLatch, TimeUnit, TimeoutException}

import io.sluice.NettyLeakDetection
import io.sluice.TestingThreads._
import io.sluice.buffer.BlockCodec
import io.sluice.memory.TestingBufferPools._
import io.sluice.partition._
import io.sluice.partition.TestingLocalDirs._
import io.sluice.partition.TestingRecords._
import io.sluice.partition.TestingResultPartitions._
import io.sluice.partition.consumer.TestingInputGates._
import io.sluice.writer.{OutputFlusher, RecordWriter}
import io.sluice.writer.TestingRecordWriters._
import org.scalatest.funsuite.AnyFunSuite

/** A consumer's gate over local channels: pipelined partitions produced concurrently, and blocking ones. */
class SingleInputGateSuite extends AnyFunSuite with NettyLeakDetection {

  private def checkChannel(reader: TestingElementReader, channel: Int, count: Int, max: Int): Unit = {
    val records = reader.records
    assert(records.size == count, s"channel $channel: ${records.size} records, expected $count")
    records.zipWithIndex.foreach { case (r, seq) =>
      assert(java.util.Arrays.equals(r, record(channel, seq, max)), s"channel $channel record $seq")
    }
    assert(!reader.hasPartialRecord)
  }

  test("a gate over several pipelined partitions produced concurrently returns every record in order") {
    withNetworkBufferPool(128, 4096) { global =>
      val manager = new ResultPartitionManager
      val flusher = new OutputFlusher("gate-test-flusher")
      try {
        val counts = Seq(3000, 800, 2000, 1)
        val max = 3000
        val partitions = counts.indices.map { i =>
          val p =
            pipelined(global, 1, poolMax = 8, maxBuffersPerSubpartition = 4, producerId = i, onReleased = manager.unregister)
          manager.registerResultPartition(p)
          p
        }
        val gate = localGate(global, manager, partitions.map(p => (p.partitionId, 0, 1)))
        val producers = counts.zipWithIndex.map { case (n, i) =>
          fork(s"producer $i") {
            val p = partitions(i)
            // Producer 0 flushes every record, 1 and 2 rely on the flusher, 3 on full buffers and finish.
            val registration = if (i == 1 || i == 2) Some(flusher.register(p, 1)) else None
            val writer = new RecordWriter(p, new ByLength(1), PointingSerializer, flushAlways = i == 0)
            (0 until n).foreach(seq => writer.emit(record(i, seq, max)))
            registration.foreach(_.cancel())
            p.finish()
            p.awaitConsumed(60000)
          }
        }
        val readers =
          try readAll(gate)
          catch {
            case e: java.util.concurrent.TimeoutException =>
              partitions.foreach(p => System.err.println("DEBUG " + p.subpartition(0) + " pool " + p.bufferPool))
              throw e
          }
        producers.foreach(_.join())
        counts.zipWithIndex.foreach { case (n, i) => checkChannel(readers(i), i, n, max) }
        assert(gate.isFinished)
        assert(gate.getNext() == null, "a finished gate keeps answering null")
        assert(gate.numBuffersInLocal.sum == readers.values.map(_.buffers).sum)
        assert(gate.numBytesInLocal.sum > 0 && gate.numBytesInRemote.sum == 0)
        assert(manager.numPartitions == 0, "every partition was consumed and released itself")
        gate.close()
      } finally flusher.shutdown()
    }
  }

  test("an idle channel does not hold up the others; the gate ends after every end of partition") {
    withNetworkBufferPool(64, 4096) { global =>
      val manager = new ResultPartitionManager
      val partitions = (0 until 3).map { i =>
        val p = pipelined(global, 1, poolMax = 4, producerId = i, onReleased = manager.unregister)
        manager.registerResultPartition(p)
        p
      }
      val gate = localGate(global, manager, partitions.map(p => (p.partitionId, 0, 1)))
      val idleMayEnd = new CountDownLatch(1)
      val max = 2000
      val count = 1500
      val producers = partitions.zipWithIndex.map { case (p, i) =>
        fork(s"producer $i") {
          if (i == 0) {
            assert(idleMayEnd.await(60, TimeUnit.SECONDS))
          } else {
            val writer = new RecordWriter(p, new ByLength(1), ScratchSerializer, flushAlways = false)
            (0 until count).foreach(seq => writer.emit(record(i, seq, max)))
          }
          p.finish()
          p.awaitConsumed(60000)
        }
      }
      val seen = Array(0, 0, 0)
      val readers = readAll(gate,
        onBuffer = (ch, r) => {
          assert(ch != 0, "the idle channel has nothing to give")
          seen(ch) = r.elements.size
          // Everything the busy producers wrote arrived while channel 0 stayed silent: now let it end.
          if (seen(1) + seen(2) == 2 * count) idleMayEnd.countDown()
        })
      producers.foreach(_.join())
      assert(idleMayEnd.getCount == 0)
      assert(readers.keySet == Set(1, 2))
      (1 to 2).foreach(i => checkChannel(readers(i), i, count, max))
      gate.close()
    }
  }

  Seq(None, Some("lz4"), Some("zstd")).foreach { codecName =>
    test(s"a gate over spilled blocking partitions (${codecName.getOrElse("uncompressed")}) reads every record") {
      withNetworkBufferPool(64, 32 * 1024) { global =>
        withTempDir { dir =>
          val manager = new ResultPartitionManager
          val codec = codecName.map(BlockCodec.forSparkCodec(_, 1))
          val max = 20000
          val written = (0 until 3).map { i =>
            val p = blocking(global, dir, 2, poolMax = 4, codec = codec, producerId = i)
            val records = (0 until 2).map(sub =>
              (0 until 60 + 20 * i).map { seq =>
                val r = record(i * 2 + sub, seq, max); emit(p, sub, r); r
              })
            assert(p.numSpills > 0, "the pool ran dry before the end")
            p.finish()
            manager.registerResultPartition(p)
            records
          }
          // Channel i reads both subpartitions of partition i; a second gate reads subpartition 1 of each.
          val gate = localGate(global, manager, (0 until 3).map(i => (ResultPartitionID(0, i), 0, 2)),
            codec = codec.map(c => BlockCodec.forSparkCodec(c.name, 1)), needsReadBuffer = true)
          val readers = readAll(gate)
          (0 until 3).foreach { i =>
            val expected = written(i)(0) ++ written(i)(1)
            val got = readers(i).records
            assert(got.size == expected.size)
            assert(got.zip(expected).forall { case (a, b) => java.util.Arrays.equals(a, b) }, s"channel $i")
          }
          gate.close()
          val second = localGate(global, manager, (0 until 3).map(i => (ResultPartitionID(0, i), 1, 2)), codec = codec,
            needsReadBuffer = true, maxChannelsInFlight = 1)
          val again = readAll(second)
          (0 until 3).foreach(i => assert(again(i).records.size == written(i)(1).size, "blocking partitions are read again"))
          second.close()
          manager.shutdown()
          assert(dir.listFiles().isEmpty, "released blocking partitions deleted their files")
        }
      }
    }
  }

  test("a corrupted spill is detected by its checksum and fails the channel") {
    withNetworkBufferPool(64, 32 * 1024) { global =>
      withTempDir { dir =>
        val manager = new ResultPartitionManager
        val codec = BlockCodec.forSparkCodec("lz4", 1)
        val p = blocking(global, dir, 1, poolMax = 4, codec = Some(codec), producerId = 4)
        (0 until 100).foreach(seq => emit(p, 0, record(0, seq, 20000)))
        p.finish()
        manager.registerResultPartition(p)
        val victim = p.file.buffer(0, 1)
        val raf = new RandomAccessFile(p.file.path, "rw")
        try { raf.seek(victim.offset + 3); val b = raf.read(); raf.seek(victim.offset + 3); raf.write(b ^ 0xff) }
        finally raf.close()
        val gate = localGate(global, manager, Seq((p.partitionId, 0, 1)), codec = Some(codec), needsReadBuffer = true)
        val e = intercept[InputChannelException](readAll(gate))
        assert(e.getCause.isInstanceOf[CorruptBufferException], e.getCause)
        assert(e.getCause.getMessage.contains("Checksum mismatch"))
        assert(e.getMessage.contains("shuffle 0 producer 4"))
        assert(e.channel.channelIndex == 0)
        gate.close()
        manager.shutdown()
      }
    }
  }

  test("hostile compressed data from a peer fails its channel (a FetchFailed), naming it; the buffer goes back") {
    withNetworkBufferPool(16, 4096) { global =>
      // An LZF chunk of 16 bytes whose first token copies from 17 bytes before the start of the output.
      val hostile = Array[Byte]('Z', 'V', 1, 0, 16, 0, 16, 0x20, 0x10, 12) ++ Array.tabulate[Byte](13)(i => i.toByte)
      val payload = io.netty.buffer.Unpooled.directBuffer(hostile.length).writeBytes(hostile)
      val gate = new SingleInputGate("test consumer", global, global.createBufferPool(1, 4, "test floating buffers"),
        Some(BlockCodec.forSparkCodec("lzf", 1)), 60000L, 60000L)
      val peer = new InputChannel(gate, 0, ResultPartitionID(3, 9), 0, 1, ProducerLocation("exec-9", "10.0.0.9", 7337)) {
        private var sent = false
        override def requestSubpartitions(): Unit = notifyChannelNonEmpty()
        override def getNextBuffer(): BufferAndAvailability =
          if (sent) null
          else {
            sent = true
            new BufferAndAvailability(0, payload, 0, compressed = true, rawLength = 16, hasChecksum = false, crc = 0,
              moreAvailable = false)
          }
        override def releaseAllResources(): Unit = ()
        override def isRemote: Boolean = true
      }
      gate.setChannels(Array[InputChannel](peer))
      val e = intercept[InputChannelException](gate.getNext())
      assert(e.channel eq peer)
      assert(e.getCause.isInstanceOf[CorruptBufferException], e.getCause)
      assert(e.getMessage.contains("shuffle 3 producer 9") && e.getMessage.contains("exec-9"), e.getMessage)
      assert(e.getMessage.contains("lzf: corrupt compressed data"), e.getMessage)
      assert(payload.refCnt() == 0, "the received buffer was released")
      gate.close()
    }
  }

  test("the request timeout names the channels still waiting") {
    withNetworkBufferPool(16, 4096) { global =>
      val manager = new ResultPartitionManager
      val quiet = pipelined(global, 1, poolMax = 2, shuffleId = 6, producerId = 41)
      val done = pipelined(global, 1, poolMax = 2, shuffleId = 6, producerId = 42)
      Seq(quiet, done).foreach(manager.registerResultPartition)
      done.finish()
      val gate = localGate(global, manager, Seq((quiet.partitionId, 0, 1), (done.partitionId, 0, 1)), requestTimeoutMs = 100)
      val e = intercept[InputChannelException](gate.getNext())
      assert(e.channel.channelIndex == 0, "the channel waited for fails")
      assert(e.getCause.isInstanceOf[TimeoutException], e.getCause)
      assert(e.getMessage.contains("spark.sluice.network.requestTimeout"))
      assert(e.getMessage.contains("shuffle 6 producer 41"))
      assert(!e.getMessage.contains("producer 42"), "the ended channel is not waiting")
      assert(e.getMessage.contains("exec-1"))
      assert(gate.idleTimeNanos.sum > 0)
      gate.close()
      manager.shutdown()
    }
  }

  test("a producer failure reaches the consumer as an InputChannelException") {
    withNetworkBufferPool(16, 4096) { global =>
      val manager = new ResultPartitionManager
      val p = pipelined(global, 1, poolMax = 2, producerId = 3)
      manager.registerResultPartition(p)
      val gate = localGate(global, manager, Seq((p.partitionId, 0, 1)))
      val consumer = fork("consumer")(readAll(gate))
      consumer.awaitWaiting()
      manager.releasePartition(p.partitionId, new RuntimeException("map task failed"))
      val e = consumer.failure()
      assert(e.isInstanceOf[InputChannelException], e)
      assert(e.getCause.isInstanceOf[ProducerFailedException])
      assert(e.getMessage.contains("map task failed"))
      gate.close()
    }
  }

  test("a local partition that is gone fails its channel when read, naming the channel, and the gate gives back its buffers") {
    withNetworkBufferPool(16, 4096) { global =>
      val manager = new ResultPartitionManager
      val missing = ResultPartitionID(4, 7)
      val gate = localGate(global, manager, Seq((missing, 0, 1)), needsReadBuffer = true)
      val e = intercept[InputChannelException](gate.getNext())
      assert(e.channel.channelIndex == 0)
      assert(e.getCause.isInstanceOf[PartitionNotFoundException], e.getCause)
      assert(e.getMessage.contains(missing.toString), e.getMessage)
      gate.close()
      assert(global.numberOfAvailableSegments == 16)
    }
  }

  test("a channel waits for a producer that registers after the consumer started") {
    withNetworkBufferPool(32, 4096) { global =>
      val manager = new ResultPartitionManager
      val ids = (0 until 2).map(i => ResultPartitionID(9, i))
      val gate = localGate(global, manager, ids.map(id => (id, 0, 1)), waitForProducer = true)
      val producers = ids.indices.map { i =>
        fork(s"late producer $i") {
          val p = pipelined(global, 1, poolMax = 4, shuffleId = 9, producerId = i, onReleased = manager.unregister)
          manager.registerResultPartition(p)
          val writer = new RecordWriter(p, new ByLength(1), PointingSerializer, flushAlways = true)
          (0 until 200).foreach(seq => writer.emit(record(i, seq, 500)))
          p.finish()
          p.awaitConsumed(60000)
        }
      }
      val readers = readAll(gate)
      producers.foreach(_.join())
      ids.indices.foreach(i => checkChannel(readers(i), i, 200, 500))
      gate.close()
    }
  }

  test("close gives back the gate's pool and scratch segments and releases unread pipelined data") {
    withNetworkBufferPool(32, 4096) { global =>
      val manager = new ResultPartitionManager
      val p = pipelined(global, 1, poolMax = 8, producerId = 1)
      manager.registerResultPartition(p)
      (0 until 20).foreach(seq => emit(p, 0, bytes(1, seq, 1000))) // four full buffers, a fifth partly written
      val required = global.numberOfRequiredSegments
      val gate = localGate(global, manager, Seq((p.partitionId, 0, 1)), codec = Some(BlockCodec.forSparkCodec("lz4", 1)),
        needsReadBuffer = true)
      assert(global.numberOfRequiredSegments == required + 1, "before it is read, a gate holds its floating pool's minimum")
      val first = gate.getNext()
      assert(global.numberOfRequiredSegments == required + 1 + 2, "the floating pool's minimum and two scratch segments")
      assert(first != null)
      first.buffer.release()
      val queuedBefore = p.numQueuedBuffers
      assert(queuedBefore > 0)
      gate.close()
      gate.close() // idempotent
      assert(gate.isClosed)
      assert(global.numberOfRequiredSegments == required)
      assert(p.numQueuedBuffers == 0, "the channel released the subpartition's queued buffers")
      p.closeBufferBuilders()
      manager.shutdown()
    }
  }

  test("a windowed gate over many local blocking partitions keeps at most its window in flight and reads every record") {
    withNetworkBufferPool(64, 4096) { global =>
      withTempDir { dir =>
        val manager = new ResultPartitionManager
        val counts = (0 until 9).map(i => 30 + 10 * i)
        counts.zipWithIndex.foreach { case (n, i) =>
          val p = blocking(global, dir, 1, poolMax = 2, producerId = i)
          (0 until n).foreach(seq => emit(p, 0, record(i, seq, 2000)))
          p.finish()
          manager.registerResultPartition(p)
        }
        val gate = localGate(global, manager, counts.indices.map(i => (ResultPartitionID(0, i), 0, 1)),
          needsReadBuffer = true, maxChannelsInFlight = 2)
        assert(gate.numChannelsRequested == 0, "nothing is requested before the first read")
        val readers = readAll(gate, onBuffer = (_, _) => assert(gate.numChannelsInFlight <= 2, s"$gate"))
        counts.zipWithIndex.foreach { case (n, i) => checkChannel(readers(i), i, n, 2000) }
        assert(gate.peakChannelsInFlight == 2 && gate.numChannelsRequested == 9)
        gate.close()
        manager.shutdown()
      }
    }
  }

  test("an interrupted wait for data throws InterruptedException, and close gives every buffer back") {
    withNetworkBufferPool(16, 4096) { global =>
      val manager = new ResultPartitionManager
      val quiet = pipelined(global, 1, poolMax = 2, producerId = 5)
      manager.registerResultPartition(quiet)
      val gate = localGate(global, manager, Seq((quiet.partitionId, 0, 1)), codec = Some(BlockCodec.forSparkCodec("lz4", 1)))
      val consumer = fork("consumer")(gate.getNext())
      consumer.awaitWaiting()
      consumer.thread.interrupt()
      assert(consumer.failure().isInstanceOf[InterruptedException])
      gate.close()
      manager.shutdown()
    }
  }
}
