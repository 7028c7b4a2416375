package org.apache.spark.shuffle.sluice

import java.util.concurrent.ConcurrentHashMap

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import io.sluice.memory.NetworkBufferPool
import io.sluice.netty.NettyConnectionManager
import io.sluice.partition.ResultPartitionManager
import io.sluice.partition.consumer.{GateInput, InputGateFactory}
import io.sluice.serialization.{RecordView, SpanningRecordDeserializer}
import org.apache.spark.shuffle.sluice.internal.{SparkInternals, TransportConfOverlay}
import org.apache.spark.{HashPartitioner, ShuffleDependency, SparkContext}
import org.apache.spark.network.sasl.SecretKeyHolder
import org.apache.spark.rdd.RDD
import org.apache.spark.storage.ShuffleBlockId

/**
 * Test-only, called through py4j on the driver of a running application (tests/run_workloads.py
 * --probe): a client of the executors' Sluice servers that is not part of the application. It
 * learns where the map outputs are as any reader does (the MapOutputTracker's statuses carry each
 * executor's Sluice port) and asks those ports for a reduce partition, with the secret it is given
 * or none, the way a stranger on the network could.
 */
object TestingDataPlaneProbe {

  val NumMaps = 4
  val NumReduces = 8
  val RecordsPerMap = 1000

  /** The probed shuffles, kept referenced so that Spark does not clean them up (and Sluice keeps their files). */
  private val kept = new ConcurrentHashMap[Int, RDD[(Int, Long)]]()

  /**
   * Shuffles (i % NumReduces, i) for i in [0, NumMaps * RecordsPerMap) into NumReduces partitions
   * through the application's shuffle manager and keeps the shuffle registered. Returns JSON:
   * its id and, per reduce partition, the values it holds, sorted.
   */
  def runShuffle(sc: SparkContext): String = {
    val shuffled = sc.parallelize(0 until NumMaps * RecordsPerMap, NumMaps)
      .map(i => (i % NumReduces, i.toLong))
      .partitionBy(new HashPartitioner(NumReduces))
    val answer = shuffled.mapPartitionsWithIndex((p, it) => Iterator(p -> it.map(_._2).toArray.sorted)).collect()
    val shuffleId = shuffled.dependencies.head.asInstanceOf[ShuffleDependency[_, _, _]].shuffleId
    kept.put(shuffleId, shuffled)
    json(Map("shuffleId" -> shuffleId,
        "partitions" -> answer.sortBy(_._1).map { case (p, values) =>
          Map("reduce" -> p, "values" -> values.toSeq.asJava).asJava
        }.toSeq.asJava))
  }

  /**
   * Asks every executor holding map outputs of `shuffleId` for reduce partition `reduce` over
   * Sluice, authenticating with `secret` (none when null), and returns JSON: the executors asked
   * (host:port of their Sluice servers), the values received in order of arrival, and the error
   * that ended the read (null when it ended normally).
   */
  def probe(sc: SparkContext, shuffleId: Int, reduce: Int, secret: String): String = {
    val conf = sc.getConf
    val dep = kept.get(shuffleId).dependencies.head.asInstanceOf[ShuffleDependency[Int, Long, Long]]
    val outputs = SparkInternals.mapSizesByExecutorId(shuffleId, 0, NumMaps, reduce, reduce + 1).toSeq.flatMap {
      case (location, blocks) => blocks.collect {
          case (ShuffleBlockId(_, mapId, _), size, _) if size > 0 =>
            MapOutput(location, mapId, 0, reduce, reduce + 1, pipelined = false)
        }
    }.toIndexedSeq
    val sluice = SluiceEnvironment.engineConf(conf)
    val pool = new NetworkBufferPool(64, sluice.segmentSize)
    val partitions = new ResultPartitionManager
    val auth = Option(secret).map(s =>
      (new SecretKeyHolder {
          override def getSaslUser(appId: String): String = "sparkSaslUser"
          override def getSecretKey(appId: String): String = s
        }, conf.getAppId))
    val connections = new NettyConnectionManager(sluice, TransportConfOverlay(SparkInternals.transportConf(conf, 1), sluice),
      partitions, auth, "127.0.0.1",
      SparkInternals.TransportPipeline)
    val values = Seq.newBuilder[Long]
    var error: String = null
    try {
      connections.start()
      val inputs = outputs.map(o => GateInput(o.partitionId(shuffleId), reduce, reduce + 1, o.producer))
      val gate = new InputGateFactory(sluice, pool, partitions, connections, "probe")
        .create("probe", inputs, SluiceEnvironment.codec(conf).map(_.apply()), waitForProducers = false, pipelined = false)
      val decoder = SparkRecordDecoder(dep.serializer, inputs.size)
      val deserializers = Array.fill(inputs.size)(new SpanningRecordDeserializer)
      val started = new Array[Boolean](inputs.size)
      val view = new RecordView
      try {
        var next = gate.getNext()
        while (next != null) {
          val ch = next.input
          if (!started(ch)) { decoder.startStream(ch); started(ch) = true }
          deserializers(ch).setNextBuffer(next.buffer)
          var kind = deserializers(ch).readNext(view)
          while (kind != SpanningRecordDeserializer.NeedMoreData) {
            if (kind == SpanningRecordDeserializer.Record) values += decoder.decode(ch, view)._2.asInstanceOf[Long]
            kind = deserializers(ch).readNext(view)
          }
          next.buffer.release()
          next = gate.getNext()
        }
      } catch {
        case e: Exception => error = s"${e.getClass.getName}: ${e.getMessage}"
      } finally gate.close()
    } finally {
      connections.shutdown()
      partitions.shutdown()
      pool.destroy()
    }
    json(Map(
        "executors" -> outputs.map(o => s"${o.producer.host}:${o.producer.port}").distinct.sorted.asJava,
        "values" -> values.result().asJava,
        "error" -> error))
  }

  /** Forgets a probed shuffle (Spark may then clean it up). */
  def release(shuffleId: Int): Unit = kept.remove(shuffleId)

  private def json(m: Map[String, Any]): String = new ObjectMapper().writeValueAsString(m.asJava)
}
