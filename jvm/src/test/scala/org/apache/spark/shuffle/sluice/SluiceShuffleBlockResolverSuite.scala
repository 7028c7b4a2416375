package org.apache.spark.shuffle.sluice

import java.io.{File, IOException}
import java.nio.ByteBuffer
import java.nio.file.Files

import scala.collection.mutable.ArrayBuffer

import io.sluice.ShuffleEnvironment
import io.sluice.buffer.BlockCodec
import io.sluice.config.SluiceConf
import io.sluice.netty.TestingGateReader
import io.sluice.partition.{ResultPartitionID, ResultPartitionType}
import io.sluice.partition.TestingRecords.record
import io.sluice.partition.TestingResultPartitions.emit
import io.sluice.partition.consumer.{GateInput, ProducerLocation}
import org.apache.spark.network.buffer.ManagedBuffer
import org.apache.spark.network.util.{MapConfigProvider, TransportConf}
import org.apache.spark.shuffle.ShuffleBlockInfo
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.storage.{BlockId, ShuffleBlockId, ShuffleDataBlockId, ShuffleIndexBlockId}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Decommissioning's shuffle migration between two executors' environments, as Spark's
 * BlockManagerDecommissioner drives it: the sender's resolver lists and exports its finished map
 * outputs, the receiver's resolver takes the blocks as streams, adopts the partitions and has the
 * driver relocate them; readers then read exactly the same records from the receiver, locally and
 * over Sluice's transport. Whatever cannot be adopted leaves no file behind.
 */
class SluiceShuffleBlockResolverSuite extends AnyFunSuite {

  private val lz4: Option[() => BlockCodec] = Some(() => BlockCodec.forSparkCodec("lz4", 1))
  private val transportConf = new TransportConf("shuffle", MapConfigProvider.EMPTY)

  private final class Executor(val name: String) {
    val dir: File = Files.createTempDirectory(s"sluice-$name").toFile
    val env = new ShuffleEnvironment(
      SluiceConf(Seq("spark.sluice.memory.segmentSize" -> "4k", "spark.sluice.network.memory" -> "2m")), name, Seq(dir), lz4,
      io.sluice.TransportSettings.plain(SparkInternals.TransportPipeline))
    val relocated = ArrayBuffer.empty[(ResultPartitionID, Int)]
    @volatile var driverKnowsShuffle: ResultPartitionID => Boolean = _ => true
    def resolver(maxDiskSize: Option[Long] = None): SluiceShuffleBlockResolver =
      new SluiceShuffleBlockResolver(new org.apache.spark.SparkConf(false), () => Some(env), () => env,
        (id, port) => { relocated.synchronized(relocated += id -> port); driverKnowsShuffle(id) }, maxDiskSize,
        () => transportConf)
    def location: ProducerLocation = ProducerLocation(name, "127.0.0.1", env.serverPort)
    def files: Seq[String] = Option(dir.listFiles()).toSeq.flatten.map(_.getName).sorted
    def close(): Unit = {
      env.shutdown()
      Option(dir.listFiles()).foreach(_.foreach(_.delete()))
      dir.delete()
    }
  }

  private def withExecutors[T](names: String*)(body: Seq[Executor] => T): T = {
    val executors = names.map(new Executor(_))
    try body(executors)
    finally executors.foreach(_.close())
  }

  /** A finished blocking map output of `numReducers` partitions registered on `e`. */
  private def mapOutput(e: Executor, id: ResultPartitionID, numReducers: Int, records: Int, skip: Int = -1): Unit = {
    val p = e.env.createBlockingPartition(id, numReducers)
    for (seq <- 0 until records; r <- 0 until numReducers if r != skip) emit(p, r, record(r, seq, 1500))
    p.finish()
    e.env.registerPartition(p)
  }

  /** Streams `buffer` into `callback` in chunks of direct memory, as Spark's transport hands them over. */
  private def stream(blockId: BlockId, buffer: ManagedBuffer, to: SluiceShuffleBlockResolver,
      failAfter: Option[Int] = None): Unit = {
    val callback = to.putShuffleBlockAsStream(blockId, null)
    assert(callback.getID == blockId.name)
    val in = buffer.createInputStream()
    try {
      val chunk = new Array[Byte](7000)
      var n = in.read(chunk)
      var sent = 0
      while (n > 0) {
        if (failAfter.exists(sent >= _)) {
          callback.onFailure(callback.getID, new IOException("connection reset"))
          return
        }
        val direct = ByteBuffer.allocateDirect(n)
        direct.put(chunk, 0, n).flip()
        callback.onData(callback.getID, direct)
        assert(!direct.hasRemaining)
        sent += n
        n = in.read(chunk)
      }
    } finally in.close()
    callback.onComplete(callback.getID)
  }

  private def migrate(info: ShuffleBlockInfo, from: SluiceShuffleBlockResolver, to: SluiceShuffleBlockResolver): Int = {
    val blocks = from.getMigrationBlocks(info)
    blocks.foreach { case (blockId, buffer) => stream(blockId, buffer, to) }
    blocks.size
  }

  /** Every record of subpartitions [start, end) of `id` on `producer`, read by a gate on `reader`. */
  private def read(reader: Executor, producer: Executor, id: ResultPartitionID, start: Int, end: Int): Seq[Seq[Byte]] = {
    val gate = new TestingGateReader(reader.env.createInputGate("test reader",
        IndexedSeq(GateInput(id, start, end, producer.location)), waitForProducers = false))
    try Iterator.continually(gate.next()).takeWhile(_ != null).map(_.toSeq).toVector
    finally gate.close()
  }

  test("a finished map output moves to a peer and reads there record for record, locally and over the network") {
    withExecutors("A", "B") { case Seq(a, b) =>
      val id = ResultPartitionID(4, 1001L)
      mapOutput(a, id, numReducers = 4, records = 3000, skip = 2)
      val pipelined = a.env.createPipelinedPartition(ResultPartitionID(5, 0), 2)
      a.env.registerPartition(pipelined)
      val (sender, receiver) = (a.resolver(), b.resolver())
      assert(sender.getStoredShuffles() == Seq(ShuffleBlockInfo(4, 1001L)), "finished blocking partitions only")
      assert(receiver.getStoredShuffles().isEmpty)

      val blocks = sender.getMigrationBlocks(ShuffleBlockInfo(4, 1001L))
      assert(blocks.map(_._1) == List(ShuffleIndexBlockId(4, 1001L, 0), ShuffleDataBlockId(4, 1001L, 0)), "index first")
      assert(blocks(1)._2.size() == a.env.partitionManager.getPartition(id).get.asInstanceOf[
        io.sluice.partition.SortMergeResultPartition].file.size)
      assert(migrate(ShuffleBlockInfo(4, 1001L), sender, receiver) == 2)

      assert(b.relocated == Seq(id -> b.env.serverPort), "the driver was told where the output lives now")
      assert(receiver.numPendingIndexes == 0)
      val adopted = b.env.partitionManager.getPartition(id)
      assert(adopted.exists(p => p.isFinished && p.partitionType == ResultPartitionType.Blocking))
      assert(receiver.getStoredShuffles() == Seq(ShuffleBlockInfo(4, 1001L)), "it can move on again")

      for ((s, e) <- Seq((0, 1), (1, 2), (2, 3), (3, 4), (0, 4))) {
        val original = read(a, a, id, s, e)
        assert(original.size == (if (s == 2 && e == 3) 0 else if (e - s == 4) 9000 else 3000))
        assert(read(a, b, id, s, e) == original, s"[$s, $e) over the network from the receiver")
        assert(read(b, b, id, s, e) == original, s"[$s, $e) locally on the receiver")
      }
      // The sender may go: the receiver's copy stands alone.
      a.env.releaseShuffle(4)
      assert(sender.getMigrationBlocks(ShuffleBlockInfo(4, 1001L)).isEmpty, "a released output is not offered")
      assert(read(b, b, id, 0, 4).size == 9000)
      assert(b.files.exists(_.startsWith("sluice-shuffle-4-1001.migrated-")))
      assert(b.files.exists(_.endsWith(".part.index")), s"the index written beside the file: ${b.files}")
      b.env.releaseShuffle(4)
      assert(b.files.isEmpty, "the migrated file goes with its shuffle")
      pipelined.release(null)
    }
  }

  test("a file that cannot be adopted leaves nothing behind; a repeated move is harmless") {
    withExecutors("A", "B") { case Seq(a, b) =>
      val ids = (0 until 5).map(i => ResultPartitionID(8, 100L + i))
      ids.foreach(mapOutput(a, _, numReducers = 3, records = 400))
      val sender = a.resolver()
      val receiver = b.resolver()
      def blocks(id: ResultPartitionID) = sender.getMigrationBlocks(ShuffleBlockInfo(id.shuffleId, id.producerId))

      // The file without its index.
      val e1 = intercept[IOException](stream(blocks(ids(0))(1)._1, blocks(ids(0))(1)._2, receiver))
      assert(e1.getMessage.contains("without its index"))
      // The connection breaks while the file is on its way.
      stream(blocks(ids(1))(0)._1, blocks(ids(1))(0)._2, receiver)
      assert(blocks(ids(1))(1)._2.size() > 7000, "the file comes in several chunks")
      stream(blocks(ids(1))(1)._1, blocks(ids(1))(1)._2, receiver, failAfter = Some(1))
      assert(b.files.isEmpty && b.env.partitionManager.numPartitions == 0)
      // ... and the sender tries again.
      assert(migrate(ShuffleBlockInfo(8, 101L), sender, receiver) == 2)
      assert(b.env.partitionManager.getPartition(ids(1)).isDefined)

      // The driver forgot the shuffle meanwhile: the copy is dropped.
      b.driverKnowsShuffle = id => id != ids(2)
      migrate(ShuffleBlockInfo(8, 102L), sender, receiver)
      assert(b.env.partitionManager.getPartition(ids(2)).isEmpty)
      // The driver cannot be reached: dropped too, and the sender hears of it.
      b.driverKnowsShuffle = id => if (id == ids(3)) throw new RuntimeException("driver unreachable") else true
      val e2 = intercept[IOException](migrate(ShuffleBlockInfo(8, 103L), sender, receiver))
      assert(e2.getMessage.contains("on the driver") && e2.getCause.getMessage == "driver unreachable")
      assert(b.env.partitionManager.getPartition(ids(3)).isEmpty)
      b.driverKnowsShuffle = _ => true

      // Moved twice (a retry after a lost answer): one partition, one file, relocated both times.
      migrate(ShuffleBlockInfo(8, 104L), sender, receiver)
      migrate(ShuffleBlockInfo(8, 104L), sender, receiver)
      assert(b.relocated.count(_._1 == ids(4)) == 2)
      assert(b.files.size == 4 && b.files.count(_.endsWith(".part.index")) == 2,
        s"the outputs of map 101 and 104 only, each with its index beside it: ${b.files}")
      assert(read(b, b, ids(4), 0, 3) == read(a, a, ids(4), 0, 3))

      // An index whose file never comes is forgotten with its shuffle.
      stream(blocks(ids(0))(0)._1, blocks(ids(0))(0)._2, receiver)
      assert(receiver.numPendingIndexes == 1)
      receiver.forgetShuffle(8)
      assert(receiver.numPendingIndexes == 0)
      b.env.releaseShuffle(8)
      assert(b.files.isEmpty)
    }
  }

  test("spark.storage.decommission.shuffleBlocks.maxDiskSize: no more files once the executor's exceed it") {
    withExecutors("A", "B") { case Seq(a, b) =>
      val id = ResultPartitionID(2, 7L)
      mapOutput(a, id, numReducers = 2, records = 300)
      mapOutput(b, ResultPartitionID(2, 8L), numReducers = 2, records = 300)
      val held = b.env.finishedBlockingPartitionBytes
      assert(held > 0)
      val blocks = a.resolver().getMigrationBlocks(ShuffleBlockInfo(2, 7L))
      val full = b.resolver(maxDiskSize = Some(held - 1))
      stream(blocks.head._1, blocks.head._2, full)
      val e = intercept[IOException](full.putShuffleBlockAsStream(blocks(1)._1, null))
      assert(e.getMessage.contains("spark.storage.decommission.shuffleBlocks.maxDiskSize") && e.getMessage.contains(s"$held"))
      val roomy = b.resolver(maxDiskSize = Some(held))
      blocks.foreach { case (blockId, buffer) => stream(blockId, buffer, roomy) }
      assert(b.env.partitionManager.getPartition(id).isDefined)
    }
  }

  test("blocks Sluice never stores are refused by name") {
    withExecutors("A") { case Seq(a) =>
      val r = a.resolver()
      val e = intercept[UnsupportedOperationException](r.putShuffleBlockAsStream(ShuffleBlockId(1, 2L, 3), null))
      assert(e.getMessage.contains("shuffle_1_2_3"))
      assert(intercept[UnsupportedOperationException](r.getBlockData(ShuffleBlockId(1, 2L, 3), None))
          .getMessage.contains("own transport"))
      assert(r.getMigrationBlocks(ShuffleBlockInfo(1, 2L)).isEmpty)
    }
  }
}
