package io.sluice.service

/**
 * A node shuffle service's metrics as JSON, for its `Status` message, its log and the driver's
 * Sluice tab: registered applications and executors, connections and readers served now, bytes
 * sent, read requests waiting for a read thread, and the disk its applications' files take
 * (walked when asked). Stateless; called on the service's housekeeping thread.
 */
private[service] object ServiceStatus {

  /** The service's totals, and the entry of application `app` when given (an application sees only its own). */
  def json(registry: ApplicationRegistry, totals: ServiceTotals, app: Option[String]): String = {
    val apps = registry.applications
    val usage = apps.map(a => a.appId -> a.diskUsage).toMap
    val fields = Seq(
      "registeredApplications" -> apps.size.toString,
      "registeredExecutors" -> apps.map(_.layout.executors.size).sum.toString,
      "connections" -> totals.connections.toString,
      "readers" -> totals.readers.toString,
      "bytesSent" -> totals.bytesSent.toString,
      "queuedReads" -> totals.queuedReads.toString,
      "diskFiles" -> usage.values.map(_._1).sum.toString,
      "diskBytes" -> usage.values.map(_._2).sum.toString) ++
      app.flatMap(registry.application).map { a =>
        val (files, bytes) = usage.getOrElse(a.appId, (0, 0L))
        "application" -> (s"""{"id":${quote(a.appId)},"executors":[${a.layout.executors.map(e => quote(e._1)).mkString(
            ",")}],""" +
          s""""diskFiles":$files,"diskBytes":$bytes}""")
      }
    fields.map { case (k, v) => s"${quote(k)}:$v" }.mkString("{", ",", "}")
  }

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

/** What a node shuffle service's transport did and holds now. */
private[service] final case class ServiceTotals(connections: Int, readers: Int, bytesSent: Long, queuedReads: Int)
