package org.apache.spark.shuffle.sluice.service

import java.io.File
import java.lang.management.ManagementFactory
import java.net.ServerSocket
import java.nio.file.Files
import javax.management.ObjectName

import scala.jdk.CollectionConverters._

import io.sluice.{NodeServiceAddress, ShuffleEnvironment, TransportSettings}
import io.sluice.config.SluiceConf
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.{GateInput, ProducerLocation}
import io.sluice.service.{ServiceMetrics, ShuffleServiceClient, TestingNodeService}
import io.sluice.service.TestingNodeService._
import org.apache.spark.network.util.{MapConfigProvider, TransportConf}
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.scalatest.funsuite.AnyFunSuite

/**
 * The daemon's metrics in Spark's metrics system: the daemon started as its main starts it, with
 * Spark's JMX sink configured through spark.metrics.conf.*, read back from this JVM's MBean server.
 */
class DaemonMetricsSourceSuite extends AnyFunSuite {

  private val jmx = ManagementFactory.getPlatformMBeanServer
  private val prefix = ServiceMetrics.SourceName + "."
  private val transportConf = new TransportConf("sluice", new MapConfigProvider(java.util.Map.of()))

  /** The service's metrics in JMX now: a gauge's Value, a counter's Count, by metric name. */
  private def published(): Map[String, Long] =
    jmx.queryNames(new ObjectName("metrics:*"), null).asScala.toSeq.flatMap { on =>
      Option(on.getKeyProperty("name")).filter(_.startsWith(prefix)).map { name =>
        val attributes = jmx.getMBeanInfo(on).getAttributes.map(_.getName)
        val attribute = if (attributes.contains("Count")) "Count" else "Value"
        name.stripPrefix(prefix) -> jmx.getAttribute(on, attribute).asInstanceOf[Number].longValue
      }
    }.toMap

  /** The published metrics once `ok` holds of them (the service's figures are read at most once a second). */
  private def publishedOnce(what: String)(ok: Map[String, Long] => Boolean): Map[String, Long] = {
    val deadline = System.nanoTime() + 30000000000L
    var now = published()
    while (!ok(now) && System.nanoTime() < deadline) {
      Thread.sleep(100)
      now = published()
    }
    assert(ok(now), s"$what: $now")
    now
  }

  private def settings(root: File, port: Int): Map[String, String] = TestingNodeService.Settings.toMap ++ Map(
    "spark.sluice.service.port" -> port.toString,
    "spark.sluice.service.allowedDirs" -> root.getPath,
    "spark.metrics.conf.shuffleService.sink.jmx.class" -> "org.apache.spark.metrics.sink.JmxSink")

  /** Executor `executorId` of `appId`, registered with the daemon at `port` as production executors register. */
  private def executor(root: File, port: Int, appId: String, executorId: String): ShuffleEnvironment = {
    val dir = new File(root, s"sluice-$appId-$executorId")
    dir.mkdirs()
    val client = new ShuffleServiceClient(transportConf, appId, None, 30000L)
    try client.registerExecutor("127.0.0.1", port, executorId, Seq(dir.getPath))
    finally client.close()
    new ShuffleEnvironment(SluiceConf(TestingNodeService.Settings), executorId, Seq(dir), None,
      TransportSettings(transportConf, None, "127.0.0.1", SparkInternals.TransportPipeline, appId = Some(appId)), None,
      Some(NodeServiceAddress("127.0.0.1", port)))
  }

  test("the daemon's figures reach the sink spark.metrics.conf.* configures, and go when it stops") {
    val root = Files.createTempDirectory("sluice-daemon").toFile
    val port = TestingNodeService.freePort()
    val daemon = SluiceShuffleServiceMain.serve(settings(root, port), "127.0.0.1")
    var executors = List.empty[ShuffleEnvironment]
    try {
      val names = ServiceMetrics.Metrics.map(_.name).toSet
      val empty = publishedOnce("every metric of an empty service")(_.keySet == names)
      for (m <- Seq("registered_applications", "registered_executors", "bytes_sent", "disk_files", "disk_bytes")) {
        assert(empty(m) == 0L, s"$m: $empty")
      }

      val writer = executor(root, port, "app-1", "1")
      executors ::= writer
      val maps = Seq(11L, 12L)
      maps.foreach(m => writeMapOutput(writer, 0, m, numSubpartitions = 4))
      val reader = executor(root, port, "app-1", "2")
      executors ::= reader
      val files = root.listFiles().toSeq.flatMap(d => d.listFiles().toSeq).filter(_.isFile)
      assert(files.count(_.getName.endsWith(".part")) == 2, files)
      val registered = publishedOnce("one application, two executors, its files") { m =>
        m("registered_applications") == 1 && m("registered_executors") == 2 && m("disk_files") == files.size
      }
      assert(registered("disk_bytes") == files.map(_.length).sum, registered)
      assert(registered("bytes_sent") == 0L, registered)

      // A read served by the daemon: its bytes are the service's bytes sent.
      val location = ProducerLocation("1", "127.0.0.1", port, node = true)
      assert(readLengths(reader, maps.map(m => GateInput(ResultPartitionID(0, m), 0, 1, location))) == expected(maps, 0))
      val sent = daemon.service.counters.bytesSent.sum
      assert(sent > 0L)
      publishedOnce("the read's bytes sent")(m => m("bytes_sent") == sent && m("queued_reads") == 0L)
    } finally {
      executors.foreach(_.shutdown())
      daemon.stop()
      Files.walk(root.toPath).iterator().asScala.toList.reverse.foreach(Files.deleteIfExists)
    }
    assert(published().isEmpty, "the daemon's metrics stayed in JMX after it stopped")
  }

  test("a sink that cannot start fails the daemon naming spark.metrics.conf, and frees its port") {
    val root = Files.createTempDirectory("sluice-daemon").toFile
    val port = TestingNodeService.freePort()
    try {
      val bad = settings(root, port) + ("spark.metrics.conf.shuffleService.sink.jmx.class" -> "no.such.Sink")
      val e = intercept[IllegalArgumentException](SluiceShuffleServiceMain.serve(bad, "127.0.0.1"))
      assert(e.getMessage.contains("spark.metrics.conf") && e.getMessage.contains("no.such.Sink"), e.getMessage)
      new ServerSocket(port).close() // the service that could not finish starting let its port go
    } finally Files.walk(root.toPath).iterator().asScala.toList.reverse.foreach(Files.deleteIfExists)
  }
}
