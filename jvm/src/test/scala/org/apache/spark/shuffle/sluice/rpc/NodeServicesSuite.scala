package org.apache.spark.shuffle.sluice.rpc

import java.net.{InetAddress, ServerSocket}

import scala.jdk.CollectionConverters._

import io.sluice.{NettyLeakDetection, NodeServiceAddress, TestingThreads}
import io.sluice.netty.TestingSecretKeyHolder
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.GateInput
import io.sluice.service.{ShuffleServiceClient, TestingCutLink, TestingNodeService}
import org.apache.logging.log4j.{Level, LogManager}
import org.apache.logging.log4j.core.{LogEvent, Logger}
import org.apache.logging.log4j.core.appender.AbstractAppender
import org.apache.logging.log4j.core.config.Property
import org.scalatest.funsuite.AnyFunSuite

/** What the driver's [[NodeServices]] tells node shuffle services, over a link that broke or to services that hang. */
class NodeServicesSuite extends AnyFunSuite with NettyLeakDetection {

  private val App = "app-20260101000000-0043"

  test("an application that ends just after its link to a service came back is still removed there") {
    val node = new TestingNodeService()
    val link = new TestingCutLink(node.port)
    try {
      val writer = node.executor(App, "1")
      TestingNodeService.writeMapOutput(writer, shuffleId = 0, mapId = 3L, numSubpartitions = 2)
      assert(node.filesOf(App).nonEmpty)
      // The driver reaches the service through the link, with a short wait per message.
      val client = new ShuffleServiceClient(node.transportConf, App, None, 1000L)
      val services = new NodeServices(() => client)
      val address = NodeServiceAddress("127.0.0.1", link.port)
      services.announced(address, "1", node.dirsOf(App, "1").map(_.getPath))
      TestingThreads.eventually(what = "the service's first status")(services.lastStatuses.contains(address))
      assert(link.connections == 1)

      // The connection the driver keeps is cut (it still looks open); the driver's next request on it
      // is lost, and a new connection gets through.
      link.cut()
      services.stop()
      assert(link.connections >= 2, "the driver tried again on a new connection")
      TestingThreads.eventually(what = "the application and its files gone from the service")(
        node.service.registry.application(App).isEmpty && node.filesOf(App).isEmpty)
    } finally {
      link.close()
      node.close()
    }
  }

  test("services that never answer hold up neither another service's messages nor the application's end") {
    def threads = Thread.getAllStackTraces.keySet.asScala.filter(_.getName.startsWith("sluice-node-services")).toSet
    val before = threads
    val node = new TestingNodeService()
    // Nodes that accept connections and never answer (a hung process, a frozen host): each message waits a minute.
    val hung = Seq.fill(3)(new ServerSocket(0, 50, InetAddress.getLoopbackAddress))
    try {
      val writer = node.executor(App, "1")
      TestingNodeService.writeMapOutput(writer, shuffleId = 0, mapId = 3L, numSubpartitions = 2)
      TestingNodeService.writeMapOutput(writer, shuffleId = 1, mapId = 4L, numSubpartitions = 2)
      val client = new ShuffleServiceClient(node.transportConf, App, None, 60000L)
      val services = new NodeServices(() => client, stopWaitMs = 2000L)
      hung.foreach(h => services.announced(NodeServiceAddress("127.0.0.1", h.getLocalPort), "2", Nil))
      services.announced(node.address, "1", node.dirsOf(App, "1").map(_.getPath)) // last: it is not told behind the others
      TestingThreads.eventually(what = "the live service's first status")(services.lastStatuses.contains(node.address))
      services.removeShuffle(0, blocking = true) // the hung services' answers are not waited for past stopWaitMs
      assert(node.filesOf(App).map(_.getName).forall(_.startsWith("sluice-shuffle-1-")) && node.filesOf(App).size == 2,
        node.filesOf(App))

      val stopping = new Thread(() => services.stop(), "test-stop")
      stopping.start()
      stopping.join(TestingThreads.Generous)
      assert(!stopping.isAlive, "the application's end waited for services that never answer")
      TestingThreads.eventually(what = "the application and its files gone from the live service")(
        node.service.registry.application(App).isEmpty && node.filesOf(App).isEmpty)
      assert(hung.forall(h => !services.lastStatuses.contains(NodeServiceAddress("127.0.0.1", h.getLocalPort))))
      TestingThreads.eventually(what = s"the driver's threads for the services ended (${threads -- before})")(
        (threads -- before).isEmpty)
    } finally {
      hung.foreach(_.close())
      node.close()
    }
  }

  for (authenticate <- Seq(false, true)) test("a service restarted without a recovery dir gets every announced " +
    s"executor registered again, and serves it${if (authenticate) " (spark.authenticate: its key too)" else ""}") {
    val secret = if (authenticate) Some(new TestingSecretKeyHolder("secret-of-the-app")) else None
    val first = new TestingNodeService(authenticate, applicationTimeoutMs = 3000L)
    var second: TestingNodeService = null
    val client = new ShuffleServiceClient(first.transportConf, App, secret, 5000L)
    val services = new NodeServices(() => client)
    try {
      val maps = Seq(1L, 2L)
      val writer = first.executor(App, "1", secret)
      maps.foreach(m => TestingNodeService.writeMapOutput(writer, shuffleId = 0, mapId = m, numSubpartitions = 3))
      writer.shutdown() // gone: only the service can serve its map outputs
      services.announced(first.address, "1", first.dirsOf(App, "1").map(_.getPath))
      TestingThreads.eventually(what = "the service's first status")(services.lastStatuses.contains(first.address))
      first.stopForRestart()
      second = new TestingNodeService(authenticate, applicationTimeoutMs = 3000L, rootDir = Some(first.root),
        servicePort = Some(first.port))
      assert(second.service.registry.application(App).isEmpty, "without a recovery dir the restart forgot the application")
      // The first answer set heartbeats a second apart (a third of the service's timeout), not 30 s.
      TestingThreads.eventually(10000L, "executor 1's dirs registered again by the driver's heartbeat")(
        second.service.registry.application(App).exists(_.layout.codeOf("1") >= 0))
      val reader = second.executor(App, "2", secret)
      val inputs = maps.map(m => GateInput(ResultPartitionID(0, m), 1, 2, second.location("1")))
      assert(TestingNodeService.readLengths(reader, inputs) == TestingNodeService.expected(maps, 1))
    } finally {
      services.stop()
      if (second != null) second.close() else first.close()
    }
  }
  test("a service that holds another key for the application is warned about once, not at every heartbeat") {
    val keyA = Some(new TestingSecretKeyHolder("secret-a"))
    val first = new TestingNodeService(authenticate = true, applicationTimeoutMs = 3000L)
    var second: TestingNodeService = null
    val client = new ShuffleServiceClient(first.transportConf, App, keyA, 5000L)
    val services = new NodeServices(() => client, stopWaitMs = 2000L)
    val warnings = new java.util.concurrent.ConcurrentLinkedQueue[String]()
    val repeats = new java.util.concurrent.atomic.AtomicInteger()
    val logger = LogManager.getLogger(classOf[NodeServices].getName).asInstanceOf[Logger]
    val appender = new AbstractAppender("node-services-test", null, null, true, Property.EMPTY_ARRAY) {
      override def append(event: LogEvent): Unit = {
        val text = event.getMessage.getFormattedMessage
        if (event.getLevel == Level.WARN) warnings.add(text)
        else if (text.contains("(as at the heartbeat before)")) repeats.incrementAndGet()
      }
    }
    appender.start()
    val level = logger.getLevel
    logger.addAppender(appender)
    logger.setLevel(Level.DEBUG) // after the appender, whose logger config would set it back
    try {
      first.executor(App, "1", keyA).shutdown()
      services.announced(first.address, "1", first.dirsOf(App, "1").map(_.getPath))
      // Heartbeats a second apart (a third of the service's timeout) once the service answered.
      TestingThreads.eventually(what = "the service's first status")(services.lastStatuses.contains(first.address))
      // The service restarts without a recovery dir, and another holder of the application's id
      // registers it there under key B before the driver's next heartbeat.
      first.stopForRestart()
      second = new TestingNodeService(authenticate = true, applicationTimeoutMs = 3000L, rootDir = Some(first.root),
        servicePort = Some(first.port))
      val other = second.client(App, Some(new TestingSecretKeyHolder("secret-b")))
      try other.registerExecutor("127.0.0.1", second.port, "9", second.dirsOf(App, "9").map(_.getPath))
      finally other.close()
      TestingThreads.eventually(10000L, "a warning that executor 1 could not be registered again")(
        warnings.asScala.exists(w => w.contains("not those of executors 1") && w.contains("another key")))
      val warned = warnings.size
      TestingThreads.eventually(10000L, "two more heartbeats failing the same way")(repeats.get >= 2)
      assert(warnings.size == warned, warnings.asScala.mkString("\n"))
    } finally {
      logger.removeAppender(appender)
      logger.setLevel(level)
      services.stop()
      client.close()
      if (second != null) second.close() else first.close()
    }
  }
}
