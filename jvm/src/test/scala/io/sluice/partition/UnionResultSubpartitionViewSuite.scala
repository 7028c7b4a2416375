package io.sluice.partition

import java.util.concurrent.{CountDownLatch, TimeUnit}

import scala.collection.mutable.ArrayBuffer

import io.netty.buffer.{ByteBufUtil, Unpooled}
import io.sluice.{NettyLeakDetection, TestingThread}
import io.sluice.memory.NetworkBufferPool
import io.sluice.memory.TestingBufferPools._
import io.sluice.partition.TestingFileHandles.openUnder
import io.sluice.partition.TestingLocalDirs._
import io.sluice.partition.TestingResultPartitions.emit
import org.scalatest.funsuite.AnyFunSuite

/**
 * The union of several finished partitions' subpartitions as one reader's stream: every input
 * checked up front, each input's view opened when the cursor reaches it and released at its end.
 */
class UnionResultSubpartitionViewSuite extends AnyFunSuite with NettyLeakDetection {

  /** `n` finished partitions of 2 subpartitions in `manager`, each with `records` 1000-byte records per subpartition. */
  private def outputs(global: NetworkBufferPool, dir: java.io.File, manager: ResultPartitionManager, n: Int,
      records: Int): IndexedSeq[SortMergeResultPartition] =
    (0 until n).map { i =>
      val p = TestingResultPartitions.blocking(global, dir, 2, poolMax = 2, producerId = i, shuffleId = 3)
      for (s <- 0 until 2; r <- 0 until records) emit(p, s, TestingRecords.bytes(s, r, 1000))
      p.finish()
      manager.registerResultPartition(p)
      p
    }

  /** Records every partition file opened in this JVM while `body` runs. */
  private def recordingOpens[T](body: ArrayBuffer[PartitionedFile] => T): T = {
    val opened = new ArrayBuffer[PartitionedFile]()
    PartitionedFileReader.ioListener = (f, what) => if (what == "open") opened.synchronized(opened += f)
    try body(opened)
    finally PartitionedFileReader.ioListener = null
  }

  test("each input's view is opened when the cursor reaches it and released at its end: one file open at a time") {
    assume(TestingFileHandles.isSupported, "needs /proc/self/fd")
    withNetworkBufferPool(64, 4096) { global =>
      withTempDir { dir =>
        val manager = new ResultPartitionManager(0)
        val ps = outputs(global, dir, manager, 6, records = 5) // about 2 segments per subpartition
        recordingOpens { opened =>
          val listener = new TestingAvailabilityListener
          val u = UnionResultSubpartitionView.open(manager, ps.map(p => (p.partitionId, 0, 2)), listener, sharedFiles = false)
          assert(u.openInput == -1 && opened.isEmpty && openUnder(dir) == 0, "nothing is opened before the first read")
          assert(listener.notifications.get == 1)
          assert(u.backlog == 1, "nothing known yet: one frame at least for the six ends")
          val ends = ArrayBuffer[Int]()
          var next = u.getNextBuffer()
          var maxOpen = 0
          while (next != null) {
            maxOpen = math.max(maxOpen, openUnder(dir))
            if (next.isEndOfPartition) {
              ends += u.lastInput
              assert(u.openInput == -1, s"input ${u.lastInput}'s view is released with its end")
              assert(openUnder(dir) == 0, "no file of a served input stays open")
            } else {
              assert(u.openInput == u.lastInput && u.openInput == u.currentInput, "only the input being read is open")
              assert(next.spilled.storedLength > 0)
              if (u.lastInput < 5) assert(u.backlog >= 1, "inputs not reached count in the backlog")
            }
            next = u.getNextBuffer()
          }
          assert(ends == (0 until 6), "one end per input, in order")
          assert(u.isFinished && maxOpen == 1)
          assert(opened.map(_.path).toSeq == ps.map(_.file.path), "each file opened once, when its turn came")
          u.releaseAllResources()
        }
        ps.foreach(p => manager.releasePartition(p.partitionId, null))
        assert(openUnder(dir) == 0)
      }
    }
  }

  test("a missing input, or a range its partition lacks, fails the whole union before any file is opened") {
    withNetworkBufferPool(64, 4096) { global =>
      withTempDir { dir =>
        val manager = new ResultPartitionManager(0)
        val ps = outputs(global, dir, manager, 4, records = 1)
        val inputs = ps.map(p => (p.partitionId, 0, 2))
        recordingOpens { opened =>
          val missing = ResultPartitionID(3, 99)
          val e = intercept[PartitionNotFoundException](UnionResultSubpartitionView.open(manager,
              inputs.take(2) ++ Seq((missing, 0, 2)) ++ inputs.drop(2), new TestingAvailabilityListener, sharedFiles = false))
          assert(e.getMessage.contains(missing.toString), e.getMessage)
          val range = intercept[IndexOutOfBoundsException](UnionResultSubpartitionView.open(manager,
              inputs :+ ((ps(0).partitionId, 1, 3)), new TestingAvailabilityListener, sharedFiles = false))
          assert(range.getMessage.contains(s"(${ps(0).partitionId}, 2 subpartitions) has no subpartitions [1, 3)"),
            range.getMessage)
          assert(manager.numRebuilt == 0, "the inputs are checked against their table rows: no partition rebuilt")
          val u = UnionResultSubpartitionView.open(manager, inputs, new TestingAvailabilityListener, sharedFiles = false)
          manager.releasePartition(ps(3).partitionId, null)
          intercept[PartitionNotFoundException](UnionResultSubpartitionView.open(manager, inputs,
              new TestingAvailabilityListener, sharedFiles = false))
          // A union opened before the release fails when its cursor reaches the released input.
          val failure = intercept[ProducerFailedException] {
            var next = u.getNextBuffer()
            while (next != null) next = u.getNextBuffer()
          }
          assert(failure.partitionId == ps(3).partitionId && u.currentInput == 3)
          assert(opened.size == 3, "the inputs before the released one were read")
          u.releaseAllResources()
        }
        ps.foreach(p => manager.releasePartition(p.partitionId, null))
      }
    }
  }

  test("released from another thread mid-read: the read under way ends, its handle closes, nothing more is opened") {
    assume(TestingFileHandles.isSupported, "needs /proc/self/fd")
    withNetworkBufferPool(64, 4096) { global =>
      withTempDir { dir =>
        val manager = new ResultPartitionManager(0)
        val ps = outputs(global, dir, manager, 3, records = 5)
        val u = UnionResultSubpartitionView.open(manager, ps.map(p => (p.partitionId, 0, 2)),
          new TestingAvailabilityListener, sharedFiles = false)
        val opening = new CountDownLatch(1)
        val proceed = new CountDownLatch(1)
        recordingOpens { opened =>
          val recording = PartitionedFileReader.ioListener
          // The reader stops inside its first getNextBuffer, as it opens input 0's file.
          PartitionedFileReader.ioListener = (f, what) => {
            recording(f, what)
            if (what == "open" && opening.getCount > 0) { opening.countDown(); proceed.await(60, TimeUnit.SECONDS) }
          }
          val reader = new TestingThread("reader")(u.getNextBuffer())
          assert(opening.await(60, TimeUnit.SECONDS), "the reader is opening input 0's file")
          assert(u.openInput == 0 && openUnder(dir) == 0)
          new TestingThread("releaser")(u.releaseAllResources()).join()
          assert(u.isReleased && u.openInput == -1, "the view being read is released at once")
          proceed.countDown()
          val got = reader.join()
          assert(openUnder(dir) == 0, "the handle the reader opened after the release is closed")
          if (got != null) {
            // A buffer handed out after all is readable through a handle of its own, and exact.
            assert(got.spilled != null && u.lastInput == 0)
            val bytes = Unpooled.buffer(got.spilled.storedLength)
            try {
              got.spilled.readInto(bytes)
              val onDisk = java.nio.file.Files.readAllBytes(ps(0).file.path.toPath)
              assert(ByteBufUtil.getBytes(bytes).sameElements(
                  onDisk.slice(got.spilled.offset.toInt, got.spilled.offset.toInt + got.spilled.storedLength)))
            } finally bytes.release()
            assert(openUnder(dir) == 0)
          }
          assert(u.getNextBuffer() == null && u.openInput == -1 && openUnder(dir) == 0)
          assert(opened.map(_.path).distinct == Seq(ps(0).file.path), "no input after the first was opened")
        }
        ps.foreach(p => manager.releasePartition(p.partitionId, null))
      }
    }
  }
}
