package org.apache.spark.shuffle.sluice

import java.io.File
import java.nio.file.Files
import java.nio.file.attribute.PosixFilePermissions

import io.sluice.NodeServiceAddress
import io.sluice.config.{ServiceOptions, SluiceConf}
import io.sluice.service.TestingNodeService
import org.apache.spark.network.util.{MapConfigProvider, TransportConf}
import org.apache.spark.shuffle.sluice.internal.SluiceLocation
import org.apache.spark.storage.BlockManagerId
import org.scalatest.funsuite.AnyFunSuite

class NodeServiceRegistrationSuite extends AnyFunSuite {

  private val transportConf = new TransportConf("sluice", new MapConfigProvider(java.util.Map.of()))

  private def conf(settings: (String, String)*): SluiceConf = SluiceConf(settings)

  private def register(c: SluiceConf, roots: Seq[File],
      announced: (NodeServiceAddress, String, Seq[String]) => Unit = (_, _, _) => (),
      attempts: NodeServiceRegistration.Attempts = NodeServiceRegistration.Attempts(30000L, 1)) =
    NodeServiceRegistration.register(c, transportConf, "app-7", "3", "127.0.0.1", roots, Seq(new File("/blockmgr")),
      None, attempts, announced)

  test("without the service, the executor serves its outputs from the BlockManager's dirs") {
    val out = register(conf(), Seq(new File("/nowhere")))
    assert(out == NodeServiceRegistration.Outcome(Seq(new File("/blockmgr")), None))
  }

  test("an executor registers its own Sluice dirs under each local root, and tells the driver which service") {
    val node = new TestingNodeService()
    val roots = Seq(Files.createTempDirectory(node.root.toPath, "root-a").toFile,
      Files.createTempDirectory(node.root.toPath, "root-b").toFile)
    try {
      var announced = Option.empty[(NodeServiceAddress, String, Seq[String])]
      val out = register(conf(ServiceOptions.ServiceEnabled.key -> "true", ServiceOptions.ServicePort.key -> node.port.toString),
        roots, (a, e, d) => announced = Some((a, e, d)))
      assert(out.service.contains(node.address) && announced.contains((node.address, "3", out.dirs.map(_.getPath))))
      assert(out.dirs == roots.map(r => new File(r, "sluice-app-7-3")) && out.dirs.forall(_.isDirectory))
      // The service may run as another user of the dirs' group (YARN's NodeManager): it lists them and deletes in them.
      assert(out.dirs.map(d => PosixFilePermissions.toString(Files.getPosixFilePermissions(d.toPath))).distinct ==
        Seq("rwxrwx---"))
      assert(node.service.registry.application("app-7").exists(_.layout.executors == Seq("3" -> out.dirs.toIndexedSeq)))
    } finally node.close()
  }

  test("a service that is not there stops the executor naming it, or with the fallback, the executor serves itself") {
    val root = Files.createTempDirectory("sluice-root").toFile
    val port = TestingNodeService.freePort() // nothing listens there
    val settings = Seq(ServiceOptions.ServiceEnabled.key -> "true", ServiceOptions.ServicePort.key -> port.toString)
    try {
      val twice = NodeServiceRegistration.Attempts(30000L, 2, retryWaitMs = 10L)
      val e = intercept[IllegalStateException](register(conf(settings: _*), Seq(root), attempts = twice))
      assert(
        e.getMessage.contains(s"127.0.0.1:$port") && e.getMessage.contains(ServiceOptions.ServiceEnabled.key) &&
          e.getMessage.contains(ServiceOptions.ServiceFallbackToExecutor.key), e.getMessage)
      val out = register(conf(settings :+ (ServiceOptions.ServiceFallbackToExecutor.key -> "true"): _*), Seq(root))
      assert(out == NodeServiceRegistration.Outcome(Seq(new File("/blockmgr")), None))
      assert(!new File(root, "sluice-app-7-3").exists(), "the fallback left the unused Sluice dir behind")
    } finally {
      new File(root, "sluice-app-7-3").delete()
      root.delete()
    }
  }

  test("an executor whose service comes up while it starts registers on a later attempt (Spark's registration settings)") {
    val port = TestingNodeService.freePort()
    val root = Files.createTempDirectory("sluice-late").toFile
    @volatile var node: TestingNodeService = null
    val starter = new Thread(() => { Thread.sleep(1000L); node = new TestingNodeService(servicePort = Some(port)) })
    starter.start()
    try {
      val settings = Seq(ServiceOptions.ServiceEnabled.key -> "true", ServiceOptions.ServicePort.key -> port.toString)
      val out = register(conf(settings: _*), Seq(root), attempts = NodeServiceRegistration.Attempts(5000L, 20, 1000L))
      starter.join()
      assert(out.service.contains(NodeServiceAddress("127.0.0.1", port)))
      assert(node.service.registry.application("app-7").exists(_.layout.executors.map(_._1) == Seq("3")))
      val spark = new org.apache.spark.SparkConf(false)
      assert(NodeServiceRegistration.Attempts.of(spark) == NodeServiceRegistration.Attempts(5000L, 3, 5000L))
      spark.set("spark.shuffle.registration.timeout", "2s").set("spark.shuffle.registration.maxAttempts", "5")
      assert(NodeServiceRegistration.Attempts.of(spark) == NodeServiceRegistration.Attempts(2000L, 5, 5000L))
    } finally {
      starter.join()
      if (node != null) node.close()
      new File(root, "sluice-app-7-3").delete()
      root.delete()
    }
  }

  test("the service's address: SLUICE_SERVICE_HOST, else spark.sluice.service.host, else the executor's host") {
    val c = conf(ServiceOptions.ServicePort.key -> "7400")
    assert(NodeServiceRegistration.serviceAddress(c, "10.0.0.5", _ => None) == NodeServiceAddress("10.0.0.5", 7400))
    val named = conf(ServiceOptions.ServicePort.key -> "7400", ServiceOptions.ServiceHost.key -> "node-1")
    assert(NodeServiceRegistration.serviceAddress(named, "10.0.0.5", _ => None) == NodeServiceAddress("node-1", 7400))
    assert(NodeServiceRegistration.serviceAddress(named, "10.0.0.5", Map("SLUICE_SERVICE_HOST" -> "192.168.1.9").get) ==
      NodeServiceAddress("192.168.1.9", 7400))
  }

  test("the service's port: SLUICE_SERVICE_PORT, else spark.sluice.service.port; a bad one named") {
    val c = conf(ServiceOptions.ServicePort.key -> "7400")
    assert(NodeServiceRegistration.serviceAddress(c, "10.0.0.5", Map("SLUICE_SERVICE_PORT" -> "7500").get) ==
      NodeServiceAddress("10.0.0.5", 7500))
    assert(NodeServiceRegistration.serviceAddress(c, "10.0.0.5", Map("SLUICE_SERVICE_PORT" -> "").get) ==
      NodeServiceAddress("10.0.0.5", 7400))
    for (bad <- Seq("http", "0", "70000")) {
      val e = intercept[IllegalArgumentException](
        NodeServiceRegistration.serviceAddress(c, "10.0.0.5", Map("SLUICE_SERVICE_PORT" -> bad).get))
      assert(e.getMessage.contains(s"SLUICE_SERVICE_PORT=$bad is not a port"), e.getMessage)
    }
  }

  test("a map output's location names its node service, and readers find the executor id, host and port in it") {
    val original = BlockManagerId("4", "10.0.0.5", 41000, Some("rack-1"))
    val served = BlockManagerId("4", "10.0.0.5", 41000, Some(SluiceLocation.encodeNode("192.168.1.9", 7338, Some("rack-1"))))
    val p = SluiceLocation.producer(served)
    assert(p.executorId == "4" && p.host == "192.168.1.9" && p.port == 7338 && p.node)
    assert(SluiceLocation.isNodeServed(served) && !SluiceLocation.isNodeServed(original))
    val own = SluiceLocation.producer(BlockManagerId("4", "10.0.0.5", 41000, Some(SluiceLocation.encode(45000, None))))
    assert(own.host == "10.0.0.5" && own.port == 45000 && !own.node)
    assert(intercept[IllegalStateException](SluiceLocation.producer(original)).getMessage.contains("no Sluice server"))
  }
}
