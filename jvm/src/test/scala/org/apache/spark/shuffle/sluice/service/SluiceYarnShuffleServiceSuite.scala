package org.apache.spark.shuffle.sluice.service

import java.io.{File, IOException}
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import io.sluice.TestingThreads
import io.sluice.netty.TestingSecretKeyHolder
import io.sluice.service.{ServiceMetrics, ShuffleServiceClient, TestingNodeService}
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.hadoop.metrics2.impl.MetricsCollectorImpl
import org.apache.hadoop.metrics2.lib.DefaultMetricsSystem
import org.apache.hadoop.yarn.api.records.{ApplicationAttemptId, ApplicationId, ContainerId, Resource}
import org.apache.hadoop.yarn.server.api.{ApplicationTerminationContext, ContainerInitializationContext}
import org.apache.spark.network.util.{MapConfigProvider, TransportConf}
import org.apache.spark.shuffle.sluice.ClassPreloader
import org.scalatest.funsuite.AnyFunSuite

/** The YARN auxiliary service through the calls a NodeManager makes, with YARN's own records. */
class SluiceYarnShuffleServiceSuite extends AnyFunSuite {

  private val app = ApplicationId.newInstance(1795900000000L, 7)
  private val appId = app.toString
  private val secret = Some(new TestingSecretKeyHolder("secret-of-app-7"))

  /** A NodeManager's dirs: its local dir (yarn.nodemanager.local-dirs) and a dir outside it. */
  private final class Node extends AutoCloseable {
    val root: File = Files.createTempDirectory("sluice-nm").toFile
    val localDir = new File(root, "nm-local-dir")
    val port: Int = TestingNodeService.freePort()
    val conf = new Configuration(false)
    conf.set("yarn.nodemanager.local-dirs", s"file://$localDir")
    conf.set("spark.sluice.service.port", port.toString)
    conf.set("spark.authenticate", "true")

    /** Executor `executorId`'s Sluice dir in the application's dir, as the executor makes it. */
    def executorDir(executorId: String, under: File = localDir): File = {
      val d = new File(under, s"usercache/u/appcache/$appId/sluice-$appId-$executorId")
      d.mkdirs()
      d
    }

    def client(): ShuffleServiceClient =
      new ShuffleServiceClient(new TransportConf("sluice", new MapConfigProvider(java.util.Map.of())), appId, secret,
        30000L)

    def register(executorId: String, dir: File): Unit = {
      val c = client()
      try c.registerExecutor("127.0.0.1", port, executorId, Seq(dir.getPath))
      finally c.close()
    }

    override def close(): Unit = Files.walk(root.toPath).iterator().asScala.toList.reverse.foreach(Files.deleteIfExists)
  }

  private def started(node: Node, recovery: Option[File] = None): SluiceYarnShuffleService = {
    val service = new SluiceYarnShuffleService
    recovery.foreach(r => service.setRecoveryPath(new Path(r.toURI)))
    service.init(node.conf)
    service.start()
    service
  }

  private def containerStarted(service: SluiceYarnShuffleService, n: Int): Unit = {
    val container = ContainerId.newContainerId(ApplicationAttemptId.newInstance(app, 1), n)
    service.initializeContainer(new ContainerInitializationContext("u", container, Resource.newInstance(512, 1)))
  }

  private def registered(service: SluiceYarnShuffleService): Int =
    """"registeredApplications":(\d+)""".r.findFirstMatchIn(service.status).map(_.group(1).toInt).getOrElse(-1)

  test("an application registers once the NodeManager started a container of it, and goes with its files when it ends") {
    val node = new Node
    val service = started(node)
    try {
      assert(service.getMetaData.getInt == node.port, "the metadata the NodeManager hands to containers is the port")
      val dir = node.executorDir("1")
      // Nobody registers an application before a container of it ran here: the first registration sets its key.
      val early = intercept[IOException](node.register("1", dir))
      assert(early.getMessage.contains(appId) && early.getMessage.contains("no container of it was started on this " +
          "NodeManager"), early.getMessage)
      containerStarted(service, 1)
      node.register("1", dir)
      assert(registered(service) == 1)
      // Only dirs under the NodeManager's local dirs.
      val outside = intercept[IOException](node.register("2", node.executorDir("2", under = node.root)))
      assert(outside.getMessage.contains("outside the dirs this service may read"), outside.getMessage)
      service.stopApplication(new ApplicationTerminationContext(app))
      val deadline = System.nanoTime() + 30000000000L
      while ((dir.exists() || registered(service) != 0) && System.nanoTime() < deadline) Thread.sleep(50)
      assert(!dir.exists() && registered(service) == 0, "the ended application's dir or registration is left")
      // An ended application cannot register again, whoever asks.
      val late = intercept[IOException](node.register("3", node.executorDir("3")))
      assert(late.getMessage.contains("no container of it was started"), late.getMessage)
    } finally {
      service.stop()
      node.close()
    }
  }

  test("once it listens, the service loads its serving path's classes on a daemon thread that ends") {
    val node = new Node
    val service = started(node)
    try {
      val p = service.classPreloader.getOrElse(fail("no class preloader started with the service"))
      TestingThreads.eventually(timeoutMs = 120000L, what = "the service's preload thread's end")(!p.isAlive)
      assert(p.loaded == ClassPreloader.servingClasses.size && p.failed == 0, s"loaded ${p.loaded}, ${p.failed} failed")
      assert(service.getMetaData.getInt == node.port)
    } finally {
      service.stop()
      node.close()
    }
  }

  test("with the NodeManager's recovery path, registrations survive a restart of the service") {
    val node = new Node
    val recovery = new File(node.root, "nm-recovery/nm-aux-services/sluice_shuffle")
    val first = started(node, Some(recovery))
    try {
      containerStarted(first, 1)
      node.register("1", node.executorDir("1"))
    } finally first.stop()
    assert(new File(recovery, "sluice/registrations.log").isFile, "no registration log under the recovery path")
    val second = started(node, Some(recovery))
    try {
      assert(registered(second) == 1, second.status)
      // The application keeps its key: the same application's next executor registers (its container started) ...
      containerStarted(second, 2)
      node.register("2", node.executorDir("2"))
      // ... and a client holding another secret cannot take the application over.
      val impostor = new ShuffleServiceClient(new TransportConf("sluice", new MapConfigProvider(java.util.Map.of())),
        appId, Some(new TestingSecretKeyHolder("not-the-secret")), 30000L)
      try {
        val e = intercept[IOException](impostor.registerExecutor("127.0.0.1", node.port, "3",
            Seq(node.executorDir("3").getPath)))
        assert(e.getMessage.contains("another key"), e.getMessage)
      } finally impostor.close()
    } finally {
      second.stop()
      node.close()
    }
  }

  /** The records the NodeManager's metrics system gets from the service's source now, by metric name; None if unregistered. */
  private def metrics2(): Option[Map[String, Long]] =
    Option(DefaultMetricsSystem.instance().getSource(ServiceMetrics.SourceName)).map { source =>
      val collector = new MetricsCollectorImpl
      source.getMetrics(collector, true)
      val records = collector.getRecords.asScala
      assert(records.map(_.name) == Seq(ServiceMetrics.SourceName))
      records.head.metrics().asScala.map(m => m.name -> m.value.longValue).toMap
    }

  test("the service's metrics are a source of the NodeManager's metrics2 system from init to stop") {
    val node = new Node
    // The NodeManager's metrics system reads a source as it registers, before the service starts.
    val initialised = new SluiceYarnShuffleService
    try {
      initialised.init(node.conf)
      val beforeStart = metrics2().getOrElse(fail("no metrics2 source after serviceInit"))
      assert(beforeStart("connections") == 0L && beforeStart("readThreads") == 0L, beforeStart)
    } finally initialised.stop()
    val service = started(node)
    try {
      val empty = metrics2().getOrElse(fail("no metrics2 source after serviceInit"))
      assert(empty.keySet == ServiceMetrics.Metrics.map(_.name).toSet, empty)
      assert(empty("registered_applications") == 0L && empty("disk_files") == 0L, empty)
      containerStarted(service, 1)
      val dir = node.executorDir("1")
      Files.write(new File(dir, "shuffle_0_1.part").toPath, Array.fill[Byte](1234)(1))
      node.register("1", dir)
      // The figures are read at most once a second.
      val deadline = System.nanoTime() + 30000000000L
      var now = metrics2().get
      while (now("registered_applications") != 1L && System.nanoTime() < deadline) {
        Thread.sleep(100)
        now = metrics2().get
      }
      assert(now("registered_applications") == 1L && now("registered_executors") == 1L, now)
      assert(now("disk_files") == 1L && now("disk_bytes") == 1234L, now)
    } finally {
      service.stop()
      node.close()
    }
    assert(metrics2().isEmpty, "the source stayed registered after serviceStop")
  }
}
