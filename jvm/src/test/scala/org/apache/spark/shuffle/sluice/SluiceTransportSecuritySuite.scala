package org.apache.spark.shuffle.sluice

import io.netty.handler.ssl.SslHandler
import io.sluice.config.{SluiceConf, SluiceOptions}
import io.sluice.netty.{TestingExecutor, TestingGateReader, TestingRecords, TestingTls}
import io.sluice.netty.TestingExecutor.{async, await, withExecutors}
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.GateInput
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.{SecurityManager, SparkConf}
import org.scalatest.funsuite.AnyFunSuite

/** How Spark's security settings reach Sluice's transport: the Spark layer's side of it. */
class SluiceTransportSecuritySuite extends AnyFunSuite {

  /** Sluice's TransportConf as the Spark layer makes it: SecurityManager's RPC SSL options, SparkTransportConf. */
  private def transportConf(settings: Map[String, String]) = {
    val conf = new SparkConf(false).setAll(settings)
    SparkInternals.transportConf(conf, 2, new SecurityManager(conf))
  }

  test("spark.ssl.rpc.* in the Spark configuration make Sluice's connections TLS") {
    val tconf = transportConf(TestingTls.settings ++ TestingExecutor.DefaultTransport)
    assert(tconf.sslRpcEnabledAndKeysAreValid())
    val a = new TestingExecutor("A", sparkTransportConf = tconf)
    val b = new TestingExecutor("B", sparkTransportConf = tconf)
    withExecutors(a, b) {
      val p = a.pipelinedPartition(ResultPartitionID(1, 0), 1)
      val reader = new TestingGateReader(b.gate("r", Vector(GateInput(p.partitionId, 0, 1, a.location))))
      val reading = async(reader.readAll())
      TestingRecords.writeMany(p, 0, 200, 300)
      p.finish()
      assert(await(reading, 60000) == Map((0L, 0) -> 200))
      val channels = Seq(b.clientChannelTo(a)) ++ a.connectionManager.serverChannels
      assert(channels.size == 2)
      channels.foreach { ch =>
        val ssl = ch.pipeline().get(classOf[SslHandler])
        assert(ssl != null && ssl.engine().getSession.getProtocol.startsWith("TLSv1."), ch.pipeline().names())
      }
      reader.close()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("spark.ssl.rpc.enabled without its keys is refused at start-up, naming the key") {
    val tconf = transportConf(Map("spark.ssl.rpc.enabled" -> "true", "spark.ssl.rpc.openSslEnabled" -> "false",
        "spark.ssl.rpc.keyStore" -> "/nonexistent/keystore.p12", "spark.ssl.rpc.keyStorePassword" -> "x"))
    val e = intercept[IllegalArgumentException](new TestingExecutor("A", sparkTransportConf = tconf))
    assert(e.getMessage.contains("spark.ssl.rpc.keyStore") && e.getMessage.contains("/nonexistent/keystore.p12"), e.getMessage)
  }

  test("with spark.authenticate off an executor warns that its shuffle data plane is open, naming the limits") {
    val sluice = SluiceConf(Seq(SluiceOptions.MaxConnectionsPerPeer.key -> "7"))
    val w = SluiceEnvironment.openDataPlaneWarning(authenticated = false, "10.0.0.5", 41234, sluice)
    assert(w.isDefined)
    Seq("spark.authenticate", "10.0.0.5:41234", s"${SluiceOptions.MaxConnectionsPerPeer.key}", "at most 7 connections",
      s"${SluiceOptions.MaxReadersPerPeer.defaultString} readers", SluiceOptions.MaxReadersPerPeer.key, "docs/security.md")
      .foreach(s => assert(w.get.contains(s), s"'$s' in: ${w.get}"))
    assert(SluiceEnvironment.openDataPlaneWarning(authenticated = true, "10.0.0.5", 41234, sluice).isEmpty)
  }
}
