package io.sluice.partition

import java.io.File
import java.nio.file.Files
import java.util.concurrent.CyclicBarrier
import java.util.concurrent.atomic.AtomicInteger

import io.sluice.NettyLeakDetection
import io.sluice.TestingThreads._
import io.sluice.memory.NetworkBufferPool
import io.sluice.memory.TestingBufferPools._
import io.sluice.partition.TestingLocalDirs.withTempDir
import io.sluice.partition.TestingRecords.{record, sameRecords}
import io.sluice.partition.TestingResultPartitions._
import org.scalatest.funsuite.AnyFunSuite

class ResultPartitionManagerSuite extends AnyFunSuite with NettyLeakDetection {

  /** A pending reader that records which partitions it was served with. */
  private final class CountingRequest extends PendingViewRequest {
    val served = new AtomicInteger
    @volatile var partition: ResultPartition = _
    override def serve(p: ResultPartition): Unit = { partition = p; served.incrementAndGet() }
  }

  test("partitions are registered once, looked up by id, and unknown ids raise PartitionNotFoundException") {
    withNetworkBufferPool(16) { global =>
      val m = new ResultPartitionManager
      val p = pipelined(global, 1, poolMax = 2, shuffleId = 3, producerId = 7, onReleased = m.unregister)
      m.registerResultPartition(p)
      assert(m.getPartition(ResultPartitionID(3, 7)).contains(p))
      assert(m.numPartitions == 1 && m.partitionIds == Set(ResultPartitionID(3, 7)))
      val dup = pipelined(global, 1, poolMax = 2, shuffleId = 3, producerId = 7)
      intercept[IllegalStateException](m.registerResultPartition(dup))
      assert(m.registerIfAbsent(dup).exists(_ eq p), "putIfAbsent-style: the partition registered before, dup left out")
      assert(m.getPartition(ResultPartitionID(3, 7)).exists(_ eq p))
      dup.release(null)
      val e = intercept[PartitionNotFoundException](
        m.createSubpartitionView(ResultPartitionID(3, 8), 0, 1, NoOpBufferAvailabilityListener))
      assert(e.getMessage.contains("shuffle 3 producer 8"))
      assert(e.partitionId == ResultPartitionID(3, 8))
      val view = m.createSubpartitionView(ResultPartitionID(3, 7), 0, 1, NoOpBufferAvailabilityListener)
      p.finish()
      assert(drain(view, new TestingElementReader))
      assert(m.numPartitions == 0, "a consumed pipelined partition unregisters itself")
      assert(m.getPartition(ResultPartitionID(3, 7)).isEmpty)
    }
  }

  test("a view request for a partition not yet registered is served when its producer registers") {
    withNetworkBufferPool(16) { global =>
      val m = new ResultPartitionManager
      val early = new CountingRequest
      val id = ResultPartitionID(1, 1)
      assert(!m.createSubpartitionViewOrWait(id, early))
      assert(early.served.get == 0)
      val cancelled = new CountingRequest
      assert(!m.createSubpartitionViewOrWait(id, cancelled))
      m.cancelPending(id, cancelled)
      val p = pipelined(global, 1, poolMax = 2, shuffleId = 1, producerId = 1)
      m.registerResultPartition(p)
      assert(early.served.get == 1 && (early.partition eq p))
      assert(cancelled.served.get == 0, "a cancelled request is not served")
      val late = new CountingRequest
      assert(m.createSubpartitionViewOrWait(id, late))
      assert(late.served.get == 1)
      m.shutdown()
      assert(p.isReleased && m.numPartitions == 0)
      val afterShutdown = pipelined(global, 1, poolMax = 2, producerId = 9)
      intercept[IllegalStateException](m.registerResultPartition(afterShutdown))
      afterShutdown.release(null)
    }
  }

  test("racing a registration against a view request serves the request exactly once") {
    val rounds = 400
    withNetworkBufferPool(rounds) { global =>
      val m = new ResultPartitionManager
      val barrier = new CyclicBarrier(2)
      val partitions = (0 until rounds).map(i => pipelined(global, 1, poolMax = 1, shuffleId = 5, producerId = i))
      val requests = IndexedSeq.fill(rounds)(new CountingRequest)
      val producer = fork("registering producer") {
        partitions.foreach { p => barrier.await(); m.registerResultPartition(p) }
      }
      val consumer = fork("requesting consumer") {
        requests.zipWithIndex.foreach { case (r, i) =>
          barrier.await(); m.createSubpartitionViewOrWait(ResultPartitionID(5, i), r)
        }
      }
      producer.join(); consumer.join()
      requests.zipWithIndex.foreach { case (r, i) =>
        assert(r.served.get == 1, s"request $i was served ${r.served.get} times")
        assert(r.partition eq partitions(i))
      }
      assert(m.releasePartitionsOfShuffle(5) == rounds)
    }
  }

  test("releasePartitionsOfShuffle releases that shuffle's partitions and drops its pending requests") {
    withNetworkBufferPool(16) { global =>
      val m = new ResultPartitionManager
      val ofOne = (0 until 3).map(i => pipelined(global, 1, poolMax = 1, shuffleId = 1, producerId = i))
      val ofTwo = pipelined(global, 1, poolMax = 1, shuffleId = 2, producerId = 0)
      (ofOne :+ ofTwo).foreach(m.registerResultPartition)
      val pending = new CountingRequest
      m.createSubpartitionViewOrWait(ResultPartitionID(1, 9), pending)
      assert(m.releasePartitionsOfShuffle(1) == 3)
      assert(ofOne.forall(_.isReleased) && !ofTwo.isReleased)
      assert(m.partitionIds == Set(ResultPartitionID(2, 0)))
      val late = pipelined(global, 1, poolMax = 1, shuffleId = 1, producerId = 9)
      m.registerResultPartition(late)
      assert(pending.served.get == 0, "a dropped request is not served by a later registration")
      assert(m.releasePartitionsOfShuffle(7) == 0)
      m.releasePartition(ResultPartitionID(2, 0), new RuntimeException("lost"))
      assert(ofTwo.isReleased && ofTwo.failureCause.getMessage == "lost")
      m.shutdown()
      assert(late.isReleased)
    }
  }

  // ---- finished blocking partitions: a table row each --------------------------------------------

  private val Subpartitions = 4

  /** Partition (shuffle, producer), finished in its file of `layout`: records in subpartitions 0, 1 and 3. */
  private def finished(global: NetworkBufferPool, layout: PartitionedFileLayout, shuffleId: Int, producerId: Long,
      cipher: Option[PartitionedFileCipher] = None): SortMergeResultPartition = {
    val id = ResultPartitionID(shuffleId, producerId)
    val pool = global.createBufferPool(1, 2, s"blocking producer $id")
    val p = new SortMergeResultPartition(id, Subpartitions, pool,
      PartitionedFile.create(layout.writtenFile(id), Subpartitions, None, cipher), 60000L)
    Seq(0, 1, 3).foreach(sp => emit(p, sp, record(sp, producerId.toInt, 200)))
    p.finish()
    p
  }

  private def readAll(m: ResultPartitionManager, id: ResultPartitionID,
      cipher: Option[PartitionedFileCipher] = None): Seq[Array[Byte]] = {
    val reader = new TestingElementReader
    val view = m.createSubpartitionView(id, 0, Subpartitions, NoOpBufferAvailabilityListener)
    try assert(drain(view, reader, cipher = cipher), s"no end of $id")
    finally view.releaseAllResources()
    reader.records
  }

  private def filesIn(dirs: Seq[File]): Seq[String] = dirs.flatMap(d => Option(d.list()).toSeq.flatten)

  private def withLocalDirs[T](body: Seq[File] => T): T = withTempDir { a =>
    val dirs = Seq(a, new File(a, "second"))
    dirs(1).mkdir()
    try body(dirs)
    finally Option(dirs(1).listFiles()).foreach(_.foreach(_.delete()))
  }

  for (encrypted <- Seq(false, true)) {
    test(s"a finished map output costs the manager at most 64 bytes of heap (encrypted: $encrypted)") {
      val n = 10000
      withNetworkBufferPool(8) { global =>
        withLocalDirs { dirs =>
          val layout = new PartitionedFileLayout(dirs.toIndexedSeq)
          val cipher = if (encrypted) Some(PartitionedFileCipher(Array.fill[Byte](16)(7), "AES/CTR/NoPadding")) else None
          val m = new ResultPartitionManager(0, Some(layout))
          // The executor's pools are its own, not the manager's: the walk stops there.
          val stop: AnyRef => Boolean = _.isInstanceOf[NetworkBufferPool]
          val empty = TestingHeap.reachableBytes(m, stop)
          var whole = 0L
          for (i <- 0 until n) {
            val p = finished(global, layout, shuffleId = 1 + i % 2, producerId = 1000L + 7L * i, cipher)
            if (i == 0) whole = TestingHeap.reachableBytes(p, stop)
            m.registerResultPartition(p)
          }
          val perOutput = (TestingHeap.reachableBytes(m, stop) - empty).toDouble / n
          info(f"$n finished outputs of $Subpartitions subpartitions: $perOutput%.1f bytes each in the manager " +
            s"(everything reachable from it, beyond what it holds empty); a partition object reaches $whole bytes")
          assert(perOutput <= 64.0)
          assert(m.numPartitions == n && m.finishedBlockingPartitions.size == n)
          assert(m.finishedBlockingBytes == dirs.flatMap(_.listFiles()).filter(_.getName.endsWith(".part")).map(_.length).sum)
          for (i <- 0 until n by 997) { // read back, from the files the ids name
            val producerId = 1000L + 7L * i
            val records = readAll(m, ResultPartitionID(1 + i % 2, producerId), cipher)
            val expected = Seq(0, 1, 3).map(sp => record(sp, producerId.toInt, 200))
            assert(sameRecords(records, expected), s"output $i")
          }
          assert(m.releasePartitionsOfShuffle(1) == n / 2)
          assert(!filesIn(dirs).exists(_.startsWith("sluice-shuffle-1-")), "the released shuffle's files are gone")
          assert(filesIn(dirs).count(_.startsWith("sluice-shuffle-2-")) == n, "the other's data and index files stay")
          m.shutdown()
          assert(filesIn(dirs).filterNot(_ == "second").isEmpty && m.numPartitions == 0)
        }
      }
    }
  }

  test("a rebuilt partition is shared while held, released for every holder, and gone from the reader cache") {
    withNetworkBufferPool(8) { global =>
      withLocalDirs { dirs =>
        val layout = new PartitionedFileLayout(dirs.toIndexedSeq)
        val m = new ResultPartitionManager(4, Some(layout))
        val ids = (0 until 3).map { i =>
          val p = finished(global, layout, 9, i.toLong)
          m.registerResultPartition(p)
          p.partitionId
        }
        assert(m.numRebuilt == 0, "registering rebuilds nothing")
        val held = m.getPartition(ids(0)).get
        assert(m.getPartition(ids(0)).get eq held, "one partition object while someone holds it")
        assert(m.isBlocking(ids(0)) && !m.isBlocking(ResultPartitionID(9, 7)))
        val kept = readThroughCache(m, ids(1))
        assert(m.fileReaders.size == 1)
        val blocked = m.createSubpartitionView(ids(0), 0, 1, NoOpBufferAvailabilityListener)
        System.gc()
        assert(System.identityHashCode(m.getPartition(ids(1)).get) == kept,
          "the server's kept reader of the file keeps the partition the manager built over it")
        m.releasePartition(ids(0), new RuntimeException("lost"))
        assert(held.isReleased && blocked.isReleased && held.failureCause.getMessage == "lost")
        assert(m.getPartition(ids(0)).isEmpty)
        assert(m.releasePartitionsOfShuffle(9) == 2)
        assert(m.fileReaders.size == 0, "the kept reader of a released file is dropped at once")
        assert(filesIn(dirs).filterNot(_ == "second").isEmpty)
        blocked.releaseAllResources()
        m.shutdown()
      }
    }
  }

  /** Reads `id` as the server does, through the manager's kept readers; returns the partition's identity hash. */
  private def readThroughCache(m: ResultPartitionManager, id: ResultPartitionID): Int = {
    val s = m.getPartition(id).get.asInstanceOf[SortMergeResultPartition]
    val view = s.createSubpartitionView(0, Subpartitions, NoOpBufferAvailabilityListener, Some(m.fileReaders))
    assert(drain(view, new TestingElementReader))
    view.releaseAllResources()
    System.identityHashCode(s)
  }

  test("a finished partition moves to another executor's manager and is read and released there") {
    withNetworkBufferPool(8) { global =>
      withLocalDirs { dirs =>
        val from = new PartitionedFileLayout(IndexedSeq(dirs(0)))
        val to = new PartitionedFileLayout(IndexedSeq(dirs(1)))
        val sender = new ResultPartitionManager(0, Some(from))
        val receiver = new ResultPartitionManager(0, Some(to))
        val id = ResultPartitionID(2, 5)
        sender.registerResultPartition(finished(global, from, 2, 5))
        val s = sender.getPartition(id).get.asInstanceOf[SortMergeResultPartition]
        val index = PartitionedFileIndex.encode(s, s.file.path.length())
        val target = to.migratedFile(id, 3)
        Files.copy(s.file.path.toPath, target.toPath)
        val adopted = SortMergeResultPartition.adopt(id, PartitionedFile.adopt(id, target, index),
          global.createBufferPool(0, 1, s"migrated $id"))
        assert(receiver.registerIfAbsent(adopted).isEmpty)
        assert(sameRecords(readAll(receiver, id), readAll(sender, id)))
        sender.releasePartition(id, null)
        assert(receiver.finishedBlockingPartitions == Seq(id) && Option(dirs(0).list()).get.toSeq == Seq("second"))
        receiver.shutdown()
        assert(Option(dirs(1).list()).get.isEmpty, "the migrated file and its index are deleted")
        sender.shutdown()
      }
    }
  }
}
