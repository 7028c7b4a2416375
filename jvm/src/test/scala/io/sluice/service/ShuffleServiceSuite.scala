package io.sluice.service

import java.io.File
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import io.sluice.{ShuffleEnvironment, TestingShuffleEnvironment, TestingThreads, TransportSettings}
import io.sluice.config.SluiceConf
import io.sluice.netty.TestingSecretKeyHolder
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.{GateInput, InputChannelException}
import io.sluice.serialization.{RecordView, SpanningRecordDeserializer}
import io.sluice.service.TestingNodeService._
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.scalatest.funsuite.AnyFunSuite

class ShuffleServiceSuite extends AnyFunSuite {

  /** Every record length `reader` reads of `inputs`, sorted (one deserializer per input, as the Spark reader keeps). */
  private def read(reader: ShuffleEnvironment, inputs: Seq[GateInput]): Seq[Int] = {
    val gate = reader.createInputGate("test reader", inputs.toIndexedSeq, waitForProducers = false)
    try {
      val deserializers = Array.fill(inputs.size)(new SpanningRecordDeserializer)
      val view = new RecordView
      val lengths = Seq.newBuilder[Int]
      var next = gate.getNext()
      while (next != null) {
        val d = deserializers(next.input)
        d.setNextBuffer(next.buffer)
        while (d.readNext(view) == SpanningRecordDeserializer.Record) lengths += view.length
        next.buffer.release()
        next = gate.getNext()
      }
      lengths.result().sorted
    } finally gate.close()
  }

  private def inputs(node: TestingNodeService, executorId: String, maps: Seq[Long], sp: Int, shuffle: Int = 0) =
    maps.map(m => GateInput(ResultPartitionID(shuffle, m), sp, sp + 1, node.location(executorId)))

  /** Executor "1" of app-1 writes `maps` of shuffle 0 and stops: its files stay for the service. */
  private def writtenAndGone(node: TestingNodeService, maps: Seq[Long], numSubpartitions: Int): Unit = {
    val writer = node.executor("app-1", "1")
    maps.foreach(m => writeMapOutput(writer, 0, m, numSubpartitions))
    writer.shutdown()
  }

  test("an executor's map outputs are read, exactly, through its node's service after the executor stopped") {
    val node = new TestingNodeService()
    try {
      val maps = Seq(11L, 12L, 13L)
      writtenAndGone(node, maps, numSubpartitions = 4)
      val files = node.filesOf("app-1")
      assert(files.count(_.getName.endsWith(".part")) == 3 && files.count(_.getName.endsWith(".index")) == 3, files)
      val reader = node.executor("app-1", "2")
      for (sp <- 0 until 4) assert(read(reader, inputs(node, "1", maps, sp)) == expected(maps, sp), s"subpartition $sp")
      assert(node.service.counters.bytesSent.sum > 0)
    } finally node.close()
  }

  test("a message to a service is tried again after a failure, and the last attempt's failure is thrown") {
    val retries = Seq.newBuilder[(Int, String)]
    var calls = 0
    val answer = ShuffleServiceClient.attempting(3, _ => 1L)((n, e) => retries += n -> e.getMessage) {
      calls += 1
      if (calls < 3) throw new java.io.IOException(s"refused $calls")
      "registered"
    }
    assert(answer == "registered" && retries.result() == Seq(1 -> "refused 1", 2 -> "refused 2"))
    calls = 0
    val e = intercept[java.io.IOException] {
      ShuffleServiceClient.attempting(2, _ => 1L)((_, _) => ()) { calls += 1; throw new java.io.IOException(s"gone $calls") }
    }
    assert(e.getMessage == "gone 2" && calls == 2)
  }

  test("a request for a map output the executor never wrote fails its channel, naming the partition") {
    val node = new TestingNodeService()
    try {
      val writer = node.executor("app-1", "1")
      writeMapOutput(writer, 0, 1L, 2)
      val reader = node.executor("app-1", "2")
      val e = intercept[InputChannelException](read(reader, inputs(node, "1", Seq(1L, 99L), 0)))
      assert(e.getMessage.contains("shuffle 0 producer 99") && e.getMessage.contains("not found"), e.getMessage)
    } finally node.close()
  }

  test("another application's reader is refused by the service, and gets none of the map outputs") {
    val node = new TestingNodeService()
    try {
      writeMapOutput(node.executor("app-a", "1"), 0, 5L, 2)
      // app-b registered an executor "1" too: its connections see app-b's outputs only.
      node.executor("app-b", "1")
      val stranger = node.executor("app-b", "2")
      val e = intercept[InputChannelException](read(stranger, inputs(node, "1", Seq(5L), 0)))
      assert(e.getMessage.contains("not found"), e.getMessage)
      // A reader of an application that never registered is refused at the upgrade, naming it.
      val unknown = new ShuffleEnvironment(node.conf, "9", node.dirsOf("app-c", "9"), None,
        TransportSettings(node.transportConf, None, "127.0.0.1", SparkInternals.TransportPipeline, appId = Some("app-c")))
      try {
        val refused = intercept[InputChannelException](read(unknown, inputs(node, "1", Seq(5L), 0)))
        assert(refused.getMessage.contains("application app-c") && refused.getMessage.contains("registered"),
          refused.getMessage)
      } finally unknown.shutdown()
    } finally node.close()
  }

  test("an executor's server refuses a reader of another application that reuses its port") {
    // Executor A of app-a goes; executor B of app-b binds the same port; a reader of app-a still
    // holds A's location and asks B's server for (shuffle 0, map 5), which B has too.
    val base = TestingShuffleEnvironment.apply()
    val port = base.serverPort
    base.shutdown()
    def env(app: String, id: String, settings: (String, String)*) = new ShuffleEnvironment(
      SluiceConf(TestingNodeService.Settings ++ settings), id, Seq(Files.createTempDirectory("sluice").toFile), None,
      TransportSettings(new org.apache.spark.network.util.TransportConf("sluice",
          new org.apache.spark.network.util.MapConfigProvider(java.util.Map.of())), None, "127.0.0.1",
        SparkInternals.TransportPipeline, portMaxRetries = 0, appId = Some(app)))
    val b = env("app-b", "B", "spark.sluice.network.port" -> port.toString)
    val reader = env("app-a", "R")
    try {
      writeMapOutput(b, 0, 5L, 2)
      val e = intercept[InputChannelException](read(reader,
          Seq(GateInput(ResultPartitionID(0, 5L), 0, 1, io.sluice.partition.consumer.ProducerLocation("A", "127.0.0.1", port)))))
      assert(e.getMessage.contains("application app-a") && e.getMessage.contains("serves application app-b only"),
        e.getMessage)
      assert(b.connectionManager.counters.bytesSent.sum == 0L, "app-b's server sent data to app-a's reader")
    } finally { b.shutdown(); reader.shutdown() }
  }

  test("with spark.authenticate, the service refuses a reader holding another application's secret") {
    val node = new TestingNodeService(authenticate = true)
    try {
      val secretA = Some(new TestingSecretKeyHolder("secret-of-a"))
      val secretB = Some(new TestingSecretKeyHolder("secret-of-b"))
      writeMapOutput(node.executor("app-a", "1", secretA), 0, 5L, 2)
      node.executor("app-b", "1", secretB)
      // A reader of app-b that claims to be app-a, with app-b's secret: refused by authentication.
      val impostor = new ShuffleEnvironment(node.conf, "7", node.dirsOf("app-b", "7"), None,
        TransportSettings(node.transportConf, secretB.map(_ -> "app-a"), "127.0.0.1", SparkInternals.TransportPipeline,
          appId = Some("app-a")))
      try intercept[InputChannelException](read(impostor, inputs(node, "1", Seq(5L), 0)))
      finally impostor.shutdown()
      // app-a's own reader, authenticated with its key, reads its output.
      val own = node.executor("app-a", "2", secretA)
      assert(read(own, inputs(node, "1", Seq(5L), 0)) == expected(Seq(5L), 0))
      // A registration of app-a under another key is refused, naming the application.
      val other = node.client("app-a", secretB)
      try {
        val e = intercept[java.io.IOException](other.registerExecutor("127.0.0.1", node.port, "3",
            node.dirsOf("app-a", "3").map(_.getPath)))
        assert(e.getMessage.contains("app-a") && e.getMessage.contains("another key"), e.getMessage)
      } finally other.close()
      // An application without spark.authenticate cannot register with an authenticating service.
      val open = node.client("app-c")
      try {
        val e = intercept[java.io.IOException](open.registerExecutor("127.0.0.1", node.port, "1",
            node.dirsOf("app-c", "1").map(_.getPath)))
        assert(e.getMessage.contains("spark.authenticate"), e.getMessage)
      } finally open.close()
    } finally node.close()
  }

  test("with spark.authenticate, a connection prepared to a node service authenticates with the application's key") {
    val node = new TestingNodeService(authenticate = true)
    try {
      val secret = Some(new TestingSecretKeyHolder("secret-of-a"))
      writeMapOutput(node.executor("app-a", "1", secret), 0, 5L, 2)
      val reader = node.executor("app-a", "2", secret)
      val factory = reader.connectionManager.clientFactory
      // As a peer executor's server (the secret itself): the service refuses it, and nothing is held.
      assert(reader.connectionManager.prepareConnection("127.0.0.1", node.port))
      TestingThreads.eventually(timeoutMs = 60000L, what = "the refused attempt forgotten") {
        factory.connection("127.0.0.1", node.port).isEmpty && reader.connectionManager.prepareConnection("127.0.0.1",
          node.port, node = true)
      }
      // As a node service (the application's key): it opens, and the first reader reads over it.
      TestingThreads.eventually(timeoutMs = 60000L, what = "the prepared connection to the service open") {
        factory.connection("127.0.0.1", node.port).exists(_.isActive)
      }
      val prepared = factory.connection("127.0.0.1", node.port).get
      assert(read(reader, inputs(node, "1", Seq(5L), 0)) == expected(Seq(5L), 0))
      assert(factory.connection("127.0.0.1", node.port).contains(prepared), "the reader used the prepared connection")
    } finally node.close()
  }

  test("a dropped shuffle's files go from every executor's dirs; an ended application's dirs go entirely") {
    val node = new TestingNodeService()
    try {
      val e1 = node.executor("app-1", "1")
      val e2 = node.executor("app-1", "2")
      Seq(e1, e2).zipWithIndex.foreach { case (e, i) =>
        writeMapOutput(e, 0, 10L + i, 2)
        writeMapOutput(e, 1, 20L + i, 2)
      }
      e1.shutdown()
      e2.shutdown()
      val client = node.client("app-1")
      try {
        assert(client.removeShuffle("127.0.0.1", node.port, 0) == 4) // two data files, two index files
        val left = node.filesOf("app-1").map(_.getName)
        assert(left.nonEmpty && left.forall(_.startsWith("sluice-shuffle-1-")), left)
        assert(client.status("127.0.0.1", node.port).contains("\"diskFiles\":4"))
        client.removeApplication("127.0.0.1", node.port)
      } finally client.close()
      assert(node.root.listFiles().toSeq.filter(_.getName.startsWith("sluice-app-1-")) == Nil)
      assert(node.service.registry.application("app-1").isEmpty)
    } finally node.close()
  }

  test("the service closes the map output files it kept open once no reader came for them for a second") {
    val node = new TestingNodeService()
    try {
      val maps = Seq(1L, 2L, 3L)
      writtenAndGone(node, maps, numSubpartitions = 2)
      val reader = node.executor("app-1", "2")
      def descriptors = node.service.totals.reads.fileDescriptors
      assert(read(reader, inputs(node, "1", maps, 0)) == expected(maps, 0))
      assert(descriptors >= maps.size, "the read kept its files open for the next reader")
      TestingThreads.eventually(what = s"the kept files closed (${descriptors} descriptors)")(descriptors == 0)
      assert(node.service.registry.application("app-1").isDefined && node.filesOf("app-1").size == 6)
      assert(read(reader, inputs(node, "1", maps, 1)) == expected(maps, 1), "a later reader opens them again")
    } finally node.close()
  }

  test("an application nothing is heard of for the timeout is removed with its files") {
    val node = new TestingNodeService(applicationTimeoutMs = 1000L)
    try {
      val e = node.executor("app-1", "1")
      writeMapOutput(e, 0, 1L, 2)
      e.shutdown()
      assert(node.filesOf("app-1").nonEmpty)
      val deadline = System.nanoTime() + 60000000000L
      // The housekeeping thread forgets the application, then deletes its files: wait for both.
      def gone = node.service.registry.application("app-1").isEmpty && node.filesOf("app-1").isEmpty
      while (!gone && System.nanoTime() < deadline) Thread.sleep(100)
      assert(node.service.registry.application("app-1").isEmpty, "a silent application was kept")
      assert(node.filesOf("app-1") == Nil)
    } finally node.close()
  }

  test("a restarted service with a recovery dir serves what executors registered before the restart") {
    val recovery = Files.createTempDirectory("sluice-recovery").toFile
    val first = new TestingNodeService(recoveryDir = Some(recovery))
    var second: TestingNodeService = null
    try {
      val writer = first.executor("app-1", "1")
      Seq(1L, 2L).foreach(m => writeMapOutput(writer, 0, m, 3))
      writer.shutdown()
      first.stopForRestart()
      val log = new File(recovery, RegistrationLog.FileName)
      assert(java.nio.file.attribute.PosixFilePermissions.toString(
        java.nio.file.Files.getPosixFilePermissions(log.toPath)) == "rw-------")
      second = new TestingNodeService(recoveryDir = Some(recovery), rootDir = Some(first.root),
        servicePort = Some(first.port))
      assert(second.service.registry.application("app-1").exists(_.layout.codeOf("1") == 0))
      val reader = second.executor("app-1", "2")
      assert(read(reader, inputs(second, "1", Seq(1L, 2L), 1)) == expected(Seq(1L, 2L), 1))
    } finally {
      if (second != null) second.close() else first.close()
      Files.walk(recovery.toPath).iterator().asScala.toList.reverse.foreach(p => Files.deleteIfExists(p))
    }
  }

  test("several executors registered at once: each one's outputs served, a refused one named, the others kept") {
    for (authenticate <- Seq(false, true)) {
      val first = new TestingNodeService(authenticate = authenticate)
      var second: TestingNodeService = null
      try {
        val secret = if (authenticate) Some(new TestingSecretKeyHolder("secret-of-app-1")) else None
        // Executors 1 and 2 wrote and are gone, and the service restarted without a recovery dir.
        for (id <- Seq("1", "2")) {
          val writer = first.executor("app-1", id, secret)
          writeMapOutput(writer, 0, id.toLong, 2)
          writer.shutdown()
        }
        first.stopForRestart()
        second = new TestingNodeService(authenticate = authenticate, rootDir = Some(first.root),
          servicePort = Some(first.port))
        val client = second.client("app-1", secret)
        try {
          // 3 names a relative dir: refused, and named, without costing 1 and 2 their registration.
          val executors = Seq("1", "2").map(id => id -> second.dirsOf("app-1", id).map(_.getPath)) :+
            ("3" -> Seq("relative/sluice-app-1-3"))
          val (_, failed) = client.registerExecutors("127.0.0.1", second.port, executors)
          assert(failed.map(_._1) == Seq("3"), s"authenticate=$authenticate: $failed")
          assert(failed.head._2.getMessage.contains("absolute"), failed.head._2.getMessage)
          assert(second.service.figures.registeredExecutors == 2, s"authenticate=$authenticate")
        } finally client.close()
        val reader = second.executor("app-1", "4", secret)
        for (id <- Seq("1", "2")) {
          assert(read(reader, inputs(second, id, Seq(id.toLong), 1)) == expected(Seq(id.toLong), 1),
            s"authenticate=$authenticate: executor $id's output")
        }
      } finally if (second != null) second.close() else first.close()
    }
  }

  test("registered dirs must be Sluice's own, absolute, real and under the allowed roots") {
    val allowed = Files.createTempDirectory("sluice-allowed").toFile
    val node = new TestingNodeService(allowedRoots = Seq(allowed))
    try {
      val client = node.client("app-1")
      def refused(dir: String): String =
        intercept[java.io.IOException](client.registerExecutor("127.0.0.1", node.port, "1", Seq(dir))).getMessage
      val inside = new File(allowed, "sluice-app-1-1")
      inside.mkdirs()
      val notSluice = new File(allowed, "blockmgr-1")
      notSluice.mkdirs()
      val link = new File(allowed, "sluice-link")
      Files.createSymbolicLink(link.toPath, node.root.toPath)
      try {
        assert(refused("relative/sluice-x").contains("absolute"))
        assert(refused(notSluice.getPath).contains("not one of Sluice's dirs"))
        assert(refused(link.getPath).contains("symbolic link"))
        assert(refused(node.dirsOf("app-1", "1").head.getPath).contains("outside the dirs"))
        assert(refused(s"${inside.getPath}/../sluice-app-1-1").contains("normalised"))
        client.registerExecutor("127.0.0.1", node.port, "1", Seq(inside.getPath))
      } finally client.close()
    } finally {
      node.close()
      Seq("sluice-link", "sluice-app-1-1", "blockmgr-1").foreach(n => new File(allowed, n).delete())
      allowed.delete()
    }
  }
}
