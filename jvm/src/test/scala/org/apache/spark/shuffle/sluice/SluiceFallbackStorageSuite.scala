package org.apache.spark.shuffle.sluice

import java.io.{EOFException, File, IOException}
import java.nio.ByteBuffer
import java.nio.file.Files

import io.sluice.{NettyLeakDetection, ShuffleEnvironment, TransportSettings}
import io.sluice.buffer.BlockCodec
import io.sluice.config.SluiceConf
import io.sluice.netty.{TestingGateReader, TestingRecords}
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.{GateInput, ProducerLocation}
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.spark.shuffle.sluice.internal.{SluiceLocation, SparkInternals}
import org.scalatest.funsuite.AnyFunSuite

/**
 * The Hadoop side of Sluice's map outputs in Spark's fallback storage, on Hadoop's local file
 * system: where a copy goes, reading it back through a gate record for record, positioned reads
 * into heap and direct buffers, and what the driver and a failed copy delete. (The Spark-level
 * path, from Spark's own FallbackStorage.copy to the reduce stage, is SluiceFallbackStorageLocalSuite's.)
 */
class SluiceFallbackStorageSuite extends AnyFunSuite with NettyLeakDetection {

  private val App = "app-20260101000000-0007"

  private def environment(name: String, fallback: Option[SluiceFallbackStorage] = None): ShuffleEnvironment = {
    val dir = Files.createTempDirectory(s"sluice-$name").toFile
    new ShuffleEnvironment(SluiceConf(Seq("spark.sluice.memory.segmentSize" -> "4k", "spark.sluice.network.memory" -> "1m",
          "spark.sluice.memory.sortBufferSize" -> "32k")), name, Seq(dir), Some(() => BlockCodec.forSparkCodec("zstd", 1)),
      TransportSettings.plain(SparkInternals.TransportPipeline), None, None, fallback)
  }

  private def deleteAll(f: File): Unit = {
    Option(f.listFiles()).foreach(_.foreach(deleteAll))
    f.delete()
  }

  private def withStorage(body: (SluiceFallbackStorage, File, ShuffleEnvironment) => Unit): Unit = {
    val root = Files.createTempDirectory("sluice-fallback-root").toFile
    val storage = new SluiceFallbackStorage(new Path(root.toURI), App, new Configuration())
    val writer = environment("A")
    try body(storage, root, writer)
    finally {
      writer.shutdown()
      deleteAll(root)
    }
  }

  private def mapOutput(env: ShuffleEnvironment, id: ResultPartitionID, records: Int): Unit = {
    val p = env.createBlockingPartition(id, 3)
    for (seq <- 0 until records; s <- 0 until 3) TestingRecords.write(p, s, TestingRecords.record(id.producerId, s, seq, 64))
    p.finish()
    env.registerPartition(p)
  }

  test("a copy lies under <path>/<application>/<shuffle>, and a gate reads it back record for record") {
    withStorage { (storage, root, a) =>
      val id = ResultPartitionID(11, 42L)
      mapOutput(a, id, records = 500)
      val exported = a.exportBlockingPartition(id).get
      storage.copy(id, exported)
      val data = new File(root, s"$App/11/sluice-42.data")
      val index = new File(root, s"$App/11/sluice-42.index")
      assert(data.length() == exported.length && index.length() == exported.index.length)
      assert(Files.readAllBytes(data.toPath).sameElements(Files.readAllBytes(exported.file.toPath)))
      storage.copy(id, exported) // a repeated copy (a retry) replaces the first
      a.releaseShuffle(11)

      val b = environment("B", Some(storage))
      try {
        val location = SluiceLocation.producer(SparkInternals.fallbackStorageLocation)
        assert(location == ProducerLocation("fallback", "remote", 7337, fallback = true), location)
        val reader = new TestingGateReader(b.createInputGate("test reader", IndexedSeq(GateInput(id, 1, 3, location)),
            waitForProducers = false))
        try assert(reader.readAll() == Map((42L, 1) -> 500, (42L, 2) -> 500))
        finally reader.close()
      } finally b.shutdown()
    }
  }

  test("positioned reads into heap and direct buffers; reads past the end name the file") {
    withStorage { (storage, _, a) =>
      val id = ResultPartitionID(2, 3L)
      mapOutput(a, id, records = 300)
      val exported = a.exportBlockingPartition(id).get
      storage.copy(id, exported)
      val expected = Files.readAllBytes(exported.file.toPath)
      val f = storage.openData(id)
      try {
        assert(f.length == expected.length)
        for (target <- Seq(ByteBuffer.allocate(10000), ByteBuffer.allocateDirect(10000), ByteBuffer.allocateDirect(70000))) {
          val n = math.min(target.capacity(), expected.length - 17)
          target.limit(n)
          f.readFully(17L, target)
          assert(!target.hasRemaining)
          target.flip()
          val got = new Array[Byte](n)
          target.get(got)
          assert(got.sameElements(expected.slice(17, 17 + n)), s"$target")
        }
        val e = intercept[EOFException](f.readFully(f.length - 3, ByteBuffer.allocate(4)))
        assert(e.getMessage.contains("sluice-3.data"), e.getMessage)
      } finally f.close()
      val missing = intercept[IOException](storage.openIndex(ResultPartitionID(2, 4L)))
      assert(missing.getMessage.contains("sluice-4.index") && missing.getMessage.contains("fallback storage"))
    }
  }

  test("deletes: one copy, a shuffle's, the application's; a failed copy leaves nothing") {
    withStorage { (storage, root, a) =>
      val ids = Seq(ResultPartitionID(1, 0L), ResultPartitionID(1, 1L), ResultPartitionID(2, 0L))
      ids.foreach { id => mapOutput(a, id, records = 20); storage.copy(id, a.exportBlockingPartition(id).get) }
      def files(dir: String) = Option(new File(root, dir).list()).map(_.toSeq.filterNot(_.endsWith(".crc")).sorted)
      assert(files(s"$App/1").contains(Seq("sluice-0.data", "sluice-0.index", "sluice-1.data", "sluice-1.index")))
      storage.delete(ids(0))
      assert(files(s"$App/1").contains(Seq("sluice-1.data", "sluice-1.index")))
      assert(new File(root, s"$App/1").list().toSeq.forall(_.contains("sluice-1")), "checksum files go too")
      storage.deleteShuffle(1)
      assert(files(s"$App/1").isEmpty && files(s"$App/2").nonEmpty)
      storage.deleteApplication()
      assert(files(App).isEmpty && root.isDirectory, "the application's directory goes, the storage's root stays")
      storage.deleteApplication() // nothing left: harmless

      val gone = ResultPartitionID(3, 9L)
      mapOutput(a, gone, records = 20)
      val exported = a.exportBlockingPartition(gone).get
      Files.delete(exported.file.toPath)
      val e = intercept[IOException](storage.copy(gone, exported))
      assert(e.getMessage.contains(s"$App/3/sluice-9.data"), e.getMessage)
      assert(files(s"$App/3").forall(_.isEmpty), s"the failed copy left ${files(s"$App/3")}")
    }
  }
}
