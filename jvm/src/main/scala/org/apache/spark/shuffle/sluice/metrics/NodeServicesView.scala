package org.apache.spark.shuffle.sluice.metrics

import scala.util.control.NonFatal

import io.sluice.NodeServiceAddress
import org.apache.spark.shuffle.sluice.SluiceShuffleDriverComponents
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.shuffle.sluice.rpc.NodeServices
import org.json4s._
import org.json4s.jackson.JsonMethods

/**
 * The node shuffle services of a running application as the Sluice tab and its JSON show them:
 * each service with its own figures from its last `Status` answer (registered applications and
 * executors, connections, readers, bytes sent, queued reads, disk), which of the application's map
 * outputs it serves (per shuffle, as the driver's MapOutputTracker has them), and which executors'
 * map outputs it serves, as the executors' reports say (live ones) and as the service says (every
 * executor of the application that registered with it, gone ones too). Built on the driver from
 * [[NodeServices]], [[SluiceDriverMetrics]] and the MapOutputTracker when the tab or its JSON is
 * shown. Immutable.
 */
private[sluice] final case class NodeServicesView(services: Seq[NodeServiceView], executors: Seq[NodeServedExecutor]) {
  def isEmpty: Boolean = services.isEmpty && executors.isEmpty
}

/**
 * One node service: where it listens, its last status and when it came (None: none yet, or
 * unreadable), and how many of the application's map outputs it serves, per shuffle id.
 */
private[sluice] final case class NodeServiceView(host: String, port: Int, statusAtMs: Option[Long],
    status: Option[NodeServiceStatus], mapOutputs: Map[Int, Int] = Map.empty)

/**
 * A service's figures (its `Status` JSON): totals over every application it serves, and this
 * application's own entry (its executors registered there and the disk their files take).
 */
private[sluice] final case class NodeServiceStatus(
    registeredApplications: Long,
    registeredExecutors: Long,
    connections: Long,
    readers: Long,
    bytesSent: Long,
    queuedReads: Long,
    diskFiles: Long,
    diskBytes: Long,
    applicationExecutors: Seq[String],
    applicationDiskFiles: Long,
    applicationDiskBytes: Long)

/** An executor whose map outputs a node service serves, as its last report said; `live`: it still reports. */
private[sluice] final case class NodeServedExecutor(executorId: String, host: String, port: Int, live: Boolean)

private[sluice] object NodeServicesView {

  val empty: NodeServicesView = NodeServicesView(Nil, Nil)

  /**
   * The running application's view (its driver components' services); asks the services for a
   * fresh status on the way, which the next view shows ([[NodeServices.refreshStatuses]]).
   */
  def current(metrics: SluiceDriverMetrics): NodeServicesView = {
    val services = SluiceShuffleDriverComponents.current.flatMap(_.nodeServices)
    services.foreach(_.refreshStatuses())
    val mapOutputs =
      if (services.isEmpty) Map.empty[NodeServiceAddress, Map[Int, Int]]
      else
        try SparkInternals.nodeServedMapOutputs.map { case ((h, p), n) => NodeServiceAddress(h, p) -> n }
        catch { case NonFatal(_) => Map.empty[NodeServiceAddress, Map[Int, Int]] } // stopping
    of(services, metrics, mapOutputs)
  }

  /**
   * The view of `services` (None: the application runs no node service), the executors' reports,
   * and `mapOutputs`: service -> shuffle id -> how many of that shuffle's map outputs it serves.
   */
  def of(services: Option[NodeServices], metrics: SluiceDriverMetrics,
      mapOutputs: Map[NodeServiceAddress, Map[Int, Int]] = Map.empty): NodeServicesView = {
    val statuses = services.map(_.lastStatuses).getOrElse(Map.empty)
    val reported = metrics.nodeServedExecutors
    val addresses = (services.map(_.known).getOrElse(Set.empty) ++ statuses.keySet ++ reported.values ++
      mapOutputs.keySet).toSeq.sortBy(a => (a.host, a.port))
    val views = addresses.map { a =>
      val last = statuses.get(a)
      NodeServiceView(a.host, a.port, last.map(_.atMs), last.flatMap(l => NodeServiceStatus.parse(l.json)),
        mapOutputs.getOrElse(a, Map.empty))
    }
    val live = metrics.liveExecutors
    val executors = reported.toSeq.sortBy(_._1).map { case (id, NodeServiceAddress(h, p)) =>
      NodeServedExecutor(id, h, p, live.contains(id))
    }
    NodeServicesView(views, executors)
  }
}

private[sluice] object NodeServiceStatus {

  /** The figures of a service's `Status` JSON; None when it is not one. */
  def parse(json: String): Option[NodeServiceStatus] =
    try {
      val v = JsonMethods.parse(json)
      if (!(v \ "registeredApplications").isInstanceOf[JInt]) return None
      def long(j: JValue): Long = j match {
        case JInt(n) => n.toLong
        case JLong(n) => n
        case JDouble(d) => d.toLong
        case _ => 0L
      }
      def field(name: String): Long = long(v \ name)
      val app = v \ "application"
      val executors = app \ "executors" match {
        case JArray(ids) => ids.collect { case JString(id) => id }
        case _ => Nil
      }
      Some(NodeServiceStatus(field("registeredApplications"), field("registeredExecutors"), field("connections"),
          field("readers"), field("bytesSent"), field("queuedReads"), field("diskFiles"), field("diskBytes"), executors,
          long(app \ "diskFiles"), long(app \ "diskBytes")))
    } catch {
      case NonFatal(_) => None
    }
}
