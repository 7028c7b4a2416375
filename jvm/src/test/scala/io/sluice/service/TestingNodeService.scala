package io.sluice.service

import java.io.File
import java.net.ServerSocket
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import io.sluice.{NodeServiceAddress, ShuffleEnvironment, TransportSettings}
import io.sluice.config.{ServiceOptions, SluiceConf}
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.ProducerLocation
import org.apache.spark.network.sasl.SecretKeyHolder
import org.apache.spark.network.util.{MapConfigProvider, TransportConf}
import org.apache.spark.shuffle.sluice.internal.SparkInternals

/**
 * A node shuffle service on loopback for engine tests, with executors that register with it the way
 * production executors do (their own `sluice-*` dirs under the node's root, an application key
 * with spark.authenticate) and write map outputs through the production path. [[close]] stops every
 * executor made here and the service, and deletes the root.
 */
final class TestingNodeService(
    authenticate: Boolean = false,
    applicationTimeoutMs: Long = 0L,
    allowedRoots: Seq[File] = Nil,
    recoveryDir: Option[File] = None,
    rootDir: Option[File] = None,
    servicePort: Option[Int] = None) extends AutoCloseable {

  val root: File = rootDir.getOrElse(Files.createTempDirectory("sluice-node").toFile)
  val port: Int = servicePort.getOrElse(TestingNodeService.freePort())
  val conf: SluiceConf = SluiceConf(TestingNodeService.Settings :+ (ServiceOptions.ServicePort.key -> port.toString))
  val transportConf = new TransportConf("sluice", new MapConfigProvider(java.util.Map.of()))
  val service = new ShuffleService(conf, transportConf,
    ServiceSettings(authenticate, applicationTimeoutMs, allowedRoots, 64, 1L << 20, recoveryDir), "127.0.0.1",
    SparkInternals.TransportPipeline)
  service.start()
  val address: NodeServiceAddress = NodeServiceAddress("127.0.0.1", port)
  private var executors = List.empty[ShuffleEnvironment]

  /** The dirs executor `executorId` of `appId` registers (made now). */
  def dirsOf(appId: String, executorId: String): Seq[File] = {
    val d = new File(root, s"sluice-$appId-$executorId")
    d.mkdirs()
    Seq(d)
  }

  /** A client of the service for `appId`, authenticating with `secret` when given. */
  def client(appId: String, secret: Option[SecretKeyHolder] = None): ShuffleServiceClient =
    new ShuffleServiceClient(transportConf, appId, secret, 30000L)

  /** An executor of `appId` registered with the service, its map outputs written where the service finds them. */
  def executor(appId: String, executorId: String, secret: Option[SecretKeyHolder] = None): ShuffleEnvironment = {
    val dirs = dirsOf(appId, executorId)
    val c = client(appId, secret)
    try c.registerExecutor("127.0.0.1", port, executorId, dirs.map(_.getPath))
    finally c.close()
    val env = new ShuffleEnvironment(conf, executorId, dirs, None,
      TransportSettings(transportConf, secret.map(_ -> appId), "127.0.0.1", SparkInternals.TransportPipeline,
        appId = Some(appId)), None, Some(address))
    synchronized(executors ::= env)
    env
  }

  /** Where a reader finds map outputs executor `executorId` wrote: this service. */
  def location(executorId: String): ProducerLocation = ProducerLocation(executorId, "127.0.0.1", port, node = true)

  /** The files of `appId` on this node. */
  def filesOf(appId: String): Seq[File] =
    Option(root.listFiles()).toSeq.flatten.filter(_.getName.startsWith(s"sluice-$appId-"))
      .flatMap(d => Option(d.listFiles()).toSeq.flatten)

  override def close(): Unit = {
    try synchronized(executors).foreach(_.shutdown())
    finally {
      service.stop(deleteFiles = true)
      Files.walk(root.toPath).iterator().asScala.toList.reverse.foreach(p => Files.deleteIfExists(p))
    }
  }

  /** Stops the service as a restart does (files and recovery log stay), leaving the executors made here running. */
  def stopForRestart(): Unit = service.stop(deleteFiles = false)
}

object TestingNodeService {

  val Settings: Seq[(String, String)] = Seq("spark.sluice.memory.segmentSize" -> "4k", "spark.sluice.network.memory" -> "1m")

  def freePort(): Int = {
    val s = new ServerSocket(0)
    try s.getLocalPort
    finally s.close()
  }

  /** Writes map output `mapId` of shuffle `shuffleId` on `env` as a map task does: records of known lengths per subpartition. */
  def writeMapOutput(env: ShuffleEnvironment, shuffleId: Int, mapId: Long, numSubpartitions: Int): Unit = {
    val p = env.createBlockingPartition(ResultPartitionID(shuffleId, mapId), numSubpartitions)
    for (sp <- 0 until numSubpartitions; r <- 0 until recordsOf(mapId, sp)) {
      io.sluice.partition.TestingResultPartitions.emit(p, sp, Array.fill(lengthOf(mapId, sp, r))((mapId + sp).toByte))
    }
    p.finish()
    env.registerPartition(p)
  }

  /** Every record length `reader` reads of `inputs`, sorted (one deserializer per input, as the Spark reader keeps). */
  def readLengths(reader: ShuffleEnvironment, inputs: Seq[io.sluice.partition.consumer.GateInput]): Seq[Int] = {
    val gate = reader.createInputGate("test reader", inputs.toIndexedSeq, waitForProducers = false)
    try {
      val deserializers = Array.fill(inputs.size)(new io.sluice.serialization.SpanningRecordDeserializer)
      val view = new io.sluice.serialization.RecordView
      val lengths = Seq.newBuilder[Int]
      var next = gate.getNext()
      while (next != null) {
        val d = deserializers(next.input)
        d.setNextBuffer(next.buffer)
        while (d.readNext(view) == io.sluice.serialization.SpanningRecordDeserializer.Record) lengths += view.length
        next.buffer.release()
        next = gate.getNext()
      }
      lengths.result().sorted
    } finally gate.close()
  }

  def recordsOf(mapId: Long, sp: Int): Int = 3 + ((mapId + sp) % 4).toInt

  def lengthOf(mapId: Long, sp: Int, r: Int): Int = 20 + (mapId * 13 + sp * 7 + r * 3).toInt % 3000

  /** The record lengths a reader of subpartition `sp` of `maps` must see, sorted. */
  def expected(maps: Seq[Long], sp: Int): Seq[Int] =
    maps.flatMap(m => (0 until recordsOf(m, sp)).map(r => lengthOf(m, sp, r))).sorted
}
