package org.apache.spark.shuffle.sluice.metrics

import io.sluice.{NettyLeakDetection, NodeServiceAddress, TestingThreads}
import io.sluice.config.SluiceConf
import io.sluice.metrics.{ExecutorSnapshot, SegmentsSnapshot}
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.GateInput
import io.sluice.service.TestingNodeService
import org.apache.spark.shuffle.sluice.rpc.{NodeServices, SluiceMessages}
import org.json4s._
import org.json4s.jackson.JsonMethods
import org.scalatest.funsuite.AnyFunSuite

/**
 * What the Sluice tab and `/sluice/json` show of node shuffle services: a real service's status,
 * asked by the driver's [[NodeServices]], read into its figures, and the executors whose reports
 * name a service, under the JSON block `node_services` in snake_case.
 */
class NodeServicesViewSuite extends AnyFunSuite with NettyLeakDetection {

  private val App = "app-20260101000000-0042"
  private val conf = SluiceConf(Seq("spark.sluice.metrics.reportInterval" -> "50ms"))
  private val segments = SegmentsSnapshot(32768, 100, 100, 0)

  private def report(executor: String, service: Option[NodeServiceAddress]) = SluiceMessages.Report(
    ExecutorSnapshot(executor, 0, segments, Nil), Nil, Some(SluiceMessages.SluiceServer(executor, "127.0.0.1", 4000)),
    service)

  test("a node service's own figures and the executors it serves, in the view and the JSON") {
    val node = new TestingNodeService()
    val client = node.client(App)
    val services = new NodeServices(() => client) // closes the client when it stops
    try {
      // Executor 3 registered with the service and wrote a map output, which executor 4 read through it.
      val writer = node.executor(App, "3")
      TestingNodeService.writeMapOutput(writer, shuffleId = 1, mapId = 7L, numSubpartitions = 2)
      val reader = node.executor(App, "4")
      val gate = reader.createInputGate("test reader",
        IndexedSeq(GateInput(ResultPartitionID(1, 7L), 0, 2,
            node.location("3"))), waitForProducers = false)
      try while ({ val b = gate.getNext(); if (b != null) b.buffer.release(); b != null }) ()
      finally gate.close()

      val m = new SluiceDriverMetrics(conf)
      m.onReport(report("3", Some(node.address)))
      m.onReport(report("5", None)) // serves its own outputs
      services.announced(node.address, "3", node.dirsOf(App, "3").map(_.getPath))
      TestingThreads.eventually(what = "the service's first status")(services.lastStatuses.contains(node.address))
      services.refreshStatuses() // the first status may predate the read
      TestingThreads.eventually(what = "a status that counts the bytes sent")(
        NodeServicesView.of(Some(services), m).services.head.status.exists(_.bytesSent > 0))

      m.onReport(report("3", Some(node.address))) // executors report every interval: 3 is live
      // The driver's MapOutputTracker: shuffle 1's map output 7, and two of shuffle 2's, at the service.
      val view = NodeServicesView.of(Some(services), m, Map(node.address -> Map(2 -> 2, 1 -> 1)))
      val Seq(s) = view.services
      assert((s.host, s.port) == ("127.0.0.1", node.port) && s.statusAtMs.exists(_ > 0))
      assert(s.mapOutputs == Map(1 -> 1, 2 -> 2))
      val st = s.status.get
      assert(st.registeredApplications == 1 && st.registeredExecutors == 2, st)
      assert(st.applicationExecutors.sorted == Seq("3", "4"), st)
      assert(st.diskFiles >= 2 && st.diskBytes > 0 && st.applicationDiskBytes == st.diskBytes, st)
      assert(view.executors == Seq(NodeServedExecutor("3", "127.0.0.1", node.port, live = true)), view.executors)

      val json = JsonMethods.parse(SluiceJson.render(SluiceJson.all(m, view)))
      val JArray(List(service)) = json \ "node_services" \ "services": @unchecked
      for (key <- Seq("host", "port", "status_at_ms", "registered_applications", "registered_executors", "connections",
          "readers", "bytes_sent", "queued_reads", "disk_files", "disk_bytes", "application_executors",
          "application_disk_files", "application_disk_bytes", "map_outputs", "shuffles")) {
        assert(service \ key != JNothing && service \ key != JNull, s"$key in $service")
      }
      assert(service \ "bytes_sent" == JLong(st.bytesSent) || service \ "bytes_sent" == JInt(st.bytesSent))
      assert(service \ "map_outputs" == JInt(3))
      assert(service \ "shuffles" == JArray(List(JObject("shuffle_id" -> JInt(1), "map_outputs" -> JInt(1)),
          JObject("shuffle_id" -> JInt(2), "map_outputs" -> JInt(2)))))
      assert(json \ "node_services" \ "executors" == JArray(List(JObject("executor_id" -> JString("3"),
            "host" -> JString("127.0.0.1"), "port" -> JInt(node.port), "live" -> JBool(true)))))

      // Executor 3 now serves its own outputs (its environment restarted without the service).
      m.onReport(report("3", None))
      assert(NodeServicesView.of(Some(services), m).executors.isEmpty)
    } finally {
      services.stop()
      node.close()
    }
  }

  test("without a node service the block is there and empty; a status that is not one reads as none") {
    val m = new SluiceDriverMetrics(conf)
    m.onReport(report("1", None))
    val view = NodeServicesView.of(None, m)
    assert(view.isEmpty)
    val json = JsonMethods.parse(SluiceJson.render(SluiceJson.all(m, view)))
    assert(json \ "node_services" == JObject("services" -> JArray(Nil), "executors" -> JArray(Nil)))
    assert(JsonMethods.parse(SluiceJson.render(SluiceJson.empty)) \ "node_services" \ "services" == JArray(Nil))
    assert(NodeServiceStatus.parse("not json").isEmpty && NodeServiceStatus.parse("""{"error":"x"}""").isEmpty)
  }
}
