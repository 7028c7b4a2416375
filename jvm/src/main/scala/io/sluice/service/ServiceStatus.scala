package io.sluice.service

import io.sluice.metrics.ServerReadSnapshot

/**
 * A node shuffle service's metrics as JSON, for its `Status` message, its log and the driver's
 * Sluice tab: registered applications and executors, connections and readers served now, bytes
 * sent, read requests waiting for a read thread, and the disk its applications' files take
 * (walked when asked). The same [[ServiceFigures]] feed the service's metrics systems
 * ([[ServiceMetrics]]). Stateless; called on the service's housekeeping thread.
 */
private[service] object ServiceStatus {

  /** The service's totals, and the entry of application `app` when given (an application sees only its own). */
  def json(registry: ApplicationRegistry, totals: ServiceTotals, app: Option[String]): String = {
    val apps = registry.applications
    val usage = apps.map(a => a.appId -> a.diskUsage).toMap
    val f = figures(apps, usage, totals)
    val fields = Seq(
      "registeredApplications" -> f.registeredApplications.toString,
      "registeredExecutors" -> f.registeredExecutors.toString,
      "connections" -> totals.connections.toString,
      "readers" -> totals.readers.toString,
      "bytesSent" -> totals.bytesSent.toString,
      "queuedReads" -> totals.queuedReads.toString,
      "diskFiles" -> f.diskFiles.toString,
      "diskBytes" -> f.diskBytes.toString) ++
      app.flatMap(registry.application).map { a =>
        val (files, bytes) = usage.getOrElse(a.appId, (0, 0L))
        "application" -> (s"""{"id":${quote(a.appId)},"executors":[${a.layout.executors.map(e => quote(e._1)).mkString(
            ",")}],""" +
          s""""diskFiles":$files,"diskBytes":$bytes}""")
      }
    fields.map { case (k, v) => s"${quote(k)}:$v" }.mkString("{", ",", "}")
  }

  /** The service's figures now: its registrations, `totals`, and its applications' files (walks their dirs). */
  def figures(registry: ApplicationRegistry, totals: ServiceTotals): ServiceFigures = {
    val apps = registry.applications
    figures(apps, apps.map(a => a.appId -> a.diskUsage).toMap, totals)
  }

  private def figures(apps: Seq[ServedApplication], usage: Map[String, (Int, Long)], totals: ServiceTotals) =
    ServiceFigures(apps.size, apps.map(_.layout.executors.size).sum, totals, usage.values.map(_._1).sum,
      usage.values.map(_._2).sum)

  private def quote(s: String): String = {
    val b = new StringBuilder("\"")
    s.foreach {
      case '"' => b.append("\\\"")
      case '\\' => b.append("\\\\")
      case c if c < ' ' => b.append(f"\\u${c.toInt}%04x")
      case c => b.append(c)
    }
    b.append('"').toString
  }
}

/**
 * What a node shuffle service's transport did and holds now: connections and readers open, bytes
 * sent since it started, and its server's reads of partition files (whose queue length is the
 * `queuedReads` of its status).
 */
final case class ServiceTotals(connections: Int, readers: Int, bytesSent: Long, reads: ServerReadSnapshot) {
  def queuedReads: Int = reads.queueLength
}

/**
 * A node shuffle service's figures at one moment: applications and executors registered (every
 * application's, executors that are gone included), its transport's [[ServiceTotals]], and the
 * files and bytes in its applications' registered dirs. Immutable.
 */
final case class ServiceFigures(registeredApplications: Int, registeredExecutors: Int, totals: ServiceTotals,
    diskFiles: Int, diskBytes: Long)
