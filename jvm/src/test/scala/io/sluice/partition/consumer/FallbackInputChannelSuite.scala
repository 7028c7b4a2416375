package io.sluice.partition.consumer

import java.io.{File, IOException, RandomAccessFile}
import java.nio.ByteBuffer
import java.nio.channels.FileChannel
import java.nio.file.{Files, StandardOpenOption}

import io.sluice.{NettyLeakDetection, ShuffleEnvironment, TransportSettings}
import io.sluice.buffer.BlockCodec
import io.sluice.config.SluiceConf
import io.sluice.memory.TestingBufferPools
import io.sluice.netty.{TestingGateReader, TestingRecords}
import io.sluice.partition.{FallbackStorage, PartitionedFileCipher, ResultPartitionID, StoredFile}
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.scalatest.funsuite.AnyFunSuite

/**
 * Map outputs a decommissioned executor left in Spark's fallback storage, read by a gate through
 * a [[FallbackInputChannel]]: the files are what the writing executor exported (as its resolver
 * copies them), the fallback storage a local directory read with positioned reads (the Spark
 * layer's Hadoop one is SluiceFallbackStorageSuite's). Reads are checked record by record against
 * what the writer wrote, compressed and encrypted too; a copy that is corrupt, cut, missing or
 * another map output's fails the channel for that map output, and every buffer comes back.
 */
class FallbackInputChannelSuite extends AnyFunSuite with NettyLeakDetection {

  private val InFallback = ProducerLocation("fallback", "remote", 7337, fallback = true)
  private val Subpartitions = 4

  /** The fallback storage as a local directory. */
  private final class LocalFallbackStorage(val dir: File) extends FallbackStorage {
    def dataFile(id: ResultPartitionID): File = new File(dir, s"${id.shuffleId}-${id.producerId}.data")
    def indexFile(id: ResultPartitionID): File = new File(dir, s"${id.shuffleId}-${id.producerId}.index")

    /** Copies finished map output `id` of `env` here, as the executor's resolver does. */
    def put(env: ShuffleEnvironment, id: ResultPartitionID): Unit = {
      val exported = env.exportBlockingPartition(id).getOrElse(fail(s"$id is not finished on ${env.executorId}"))
      Files.copy(exported.file.toPath, dataFile(id).toPath)
      Files.write(indexFile(id).toPath, exported.index)
    }

    override def openData(id: ResultPartitionID): StoredFile = open(dataFile(id))
    override def openIndex(id: ResultPartitionID): StoredFile = open(indexFile(id))

    private def open(f: File): StoredFile = {
      val ch = FileChannel.open(f.toPath, StandardOpenOption.READ)
      new StoredFile {
        override val length: Long = ch.size()
        override def readFully(position: Long, target: ByteBuffer): Unit = {
          var at = position
          while (target.hasRemaining) {
            val n = ch.read(target, at)
            if (n < 0) throw new IOException(s"$f ends at $at")
            at += n
          }
        }
        override def close(): Unit = ch.close()
        override def toString: String = f.getPath
      }
    }
  }

  /** Where `env`'s own map outputs are read from: its own executor. */
  private def local(env: ShuffleEnvironment): ProducerLocation = ProducerLocation(env.executorId, "127.0.0.1", env.serverPort)

  private def tempDir(name: String): File = Files.createTempDirectory(s"sluice-fallback-$name").toFile

  private def deleteAll(dir: File): Unit = {
    Option(dir.listFiles()).foreach(_.foreach(f => if (f.isDirectory) deleteAll(f) else f.delete()))
    dir.delete()
  }

  private def environment(name: String, codec: Option[() => BlockCodec], cipher: Option[PartitionedFileCipher],
      fallback: Option[FallbackStorage]): ShuffleEnvironment =
    new ShuffleEnvironment(SluiceConf(Seq("spark.sluice.memory.segmentSize" -> "4k", "spark.sluice.network.memory" -> "2m",
          "spark.sluice.memory.sortBufferSize" -> "64k")), name, Seq(tempDir(name)), codec,
      TransportSettings.plain(SparkInternals.TransportPipeline), cipher, None, fallback)

  /** A finished, registered map output of `env` with `records` records of each subpartition. */
  private def mapOutput(env: ShuffleEnvironment, id: ResultPartitionID, records: Int): Unit = {
    val p = env.createBlockingPartition(id, Subpartitions)
    for (seq <- 0 until records; s <- 0 until Subpartitions) {
      TestingRecords.write(p, s, TestingRecords.record(id.producerId, s, seq, 40 + (seq * 37 + s) % 300))
    }
    p.finish()
    env.registerPartition(p)
  }

  private def read(env: ShuffleEnvironment, inputs: IndexedSeq[GateInput]): (Map[(Long, Int), Int], SingleInputGate) = {
    val gate = env.createInputGate("test reader", inputs, waitForProducers = false)
    val reader = new TestingGateReader(gate)
    try (reader.readAll(), gate)
    finally reader.close()
  }

  /** A writer A, a reader B, both reading the same fallback storage; everything is shut down and deleted after `body`. */
  private def withExecutors(codec: Option[() => BlockCodec], cipher: Option[PartitionedFileCipher])(
      body: (ShuffleEnvironment, ShuffleEnvironment, LocalFallbackStorage) => Unit): Unit = {
    val storage = new LocalFallbackStorage(tempDir("storage"))
    val a = environment("A", codec, cipher, Some(storage))
    val b = environment("B", codec, cipher, Some(storage))
    try {
      body(a, b, storage)
      TestingBufferPools.assertFull(b.networkBufferPool)
    } finally {
      Seq(a, b).foreach(_.shutdown())
      deleteAll(storage.dir)
    }
  }

  private val lz4: Option[() => BlockCodec] = Some(() => BlockCodec.forSparkCodec("lz4", 1))
  private val cipher = Some(PartitionedFileCipher(Array.fill[Byte](16)(5), "AES/CTR/NoPadding"))

  for ((name, codec, encryption) <- Seq(("plain", None, None), ("lz4", lz4, None), ("lz4, encrypted", lz4, cipher))) {
    test(s"map outputs in the fallback storage read back record for record, beside local ones ($name)") {
      withExecutors(codec, encryption) { (a, b, storage) =>
        val ids = (0 until 3).map(m => ResultPartitionID(3, 100L + m))
        ids.foreach(mapOutput(a, _, records = 600))
        val ranges = Seq((1, 3), (0, 4), (2, 3))
        def inputs(at: ProducerLocation) = ids.zip(ranges).map { case (id, (s, e)) => GateInput(id, s, e, at) }
        val (written, _) = read(a, inputs(local(a)))
        assert(written.values.sum == 600 * (2 + 4 + 1))
        ids.foreach(storage.put(a, _))
        a.releaseShuffle(3) // A's own files are gone: whatever B reads comes from the copies
        a.shutdown()

        val own = ResultPartitionID(3, 200L)
        mapOutput(b, own, records = 50)
        val (got, gate) = read(b, inputs(InFallback) :+ GateInput(own, 0, 2, local(b)))
        assert(gate.channel(0).isInstanceOf[FallbackInputChannel] && gate.channel(1).isInstanceOf[LocalInputChannel])
        assert(gate.numberOfChannels == 2, "one channel for every input in the fallback storage")
        assert(got == written ++ Map((200L, 0) -> 50, (200L, 1) -> 50))
        assert(gate.numBuffersInLocal.sum > 0 && gate.numBuffersInRemote.sum == 0, "fallback reads count as local")
      }
    }
  }

  private def failure(b: ShuffleEnvironment, inputs: IndexedSeq[GateInput]): InputChannelException = {
    val gate = b.createInputGate("test reader", inputs, waitForProducers = false)
    val reader = new TestingGateReader(gate)
    try {
      val e = intercept[InputChannelException](reader.readAll())
      assert(gate.inputToBlame(e) == 1, s"the broken map output is blamed: $e")
      assert(e.getMessage.contains("Spark's fallback storage"), e.getMessage)
      e
    } finally reader.close()
  }

  test("a copy that is corrupt, cut, missing or another map output's fails its channel for that map output") {
    withExecutors(lz4, None) { (a, b, storage) =>
      val ids = (0 until 6).map(m => ResultPartitionID(5, m.toLong))
      ids.foreach(mapOutput(a, _, records = 300))
      ids.foreach(storage.put(a, _))
      def pair(broken: ResultPartitionID) = IndexedSeq(GateInput(ids(0), 0, 4, InFallback), GateInput(broken, 0, 4, InFallback))

      // One byte of a stored buffer flipped: its checksum no longer matches.
      val flipped = storage.dataFile(ids(1))
      val raf = new RandomAccessFile(flipped, "rw")
      try { val at = raf.length() / 2; raf.seek(at); val v = raf.read(); raf.seek(at); raf.write(v ^ 0x10) }
      finally raf.close()
      val corrupt = failure(b, pair(ids(1)))
      assert(corrupt.getCause.isInstanceOf[CorruptBufferException] && corrupt.getCause.getMessage.contains("Checksum"),
        corrupt.getCause)

      // The data file cut short: the index describes more.
      val cut = storage.dataFile(ids(2))
      val ch = FileChannel.open(cut.toPath, StandardOpenOption.WRITE)
      try ch.truncate(ch.size() - 100)
      finally ch.close()
      assert(failure(b, pair(ids(2))).getCause.getMessage.contains("the index describes"))

      // Another map output's index in its place.
      Files.copy(storage.indexFile(ids(4)).toPath, storage.indexFile(ids(3)).toPath,
        java.nio.file.StandardCopyOption.REPLACE_EXISTING)
      assert(failure(b, pair(ids(3))).getCause.getMessage.contains("it is the index of shuffle 5 producer 4"))

      // Gone.
      storage.dataFile(ids(5)).delete()
      assert(failure(b, pair(ids(5))).getCause.getMessage.contains(storage.dataFile(ids(5)).getName))
    }
  }

  test("an executor without the fallback storage fails the channel naming the setting") {
    val storage = new LocalFallbackStorage(tempDir("storage"))
    val a = environment("A", None, None, Some(storage))
    val b = environment("B", None, None, None)
    try {
      val copied = ResultPartitionID(6, 0L)
      mapOutput(a, copied, records = 10)
      storage.put(a, copied)
      val own = ResultPartitionID(6, 1L)
      mapOutput(b, own, records = 10)
      val e = failure(b, IndexedSeq(GateInput(own, 0, 4, local(b)), GateInput(copied, 0, 4, InFallback)))
      assert(e.getCause.getMessage.contains("spark.storage.decommission.fallbackStorage.path"), e.getCause)
      TestingBufferPools.assertFull(b.networkBufferPool)
    } finally {
      Seq(a, b).foreach(_.shutdown())
      deleteAll(storage.dir)
    }
  }
}
