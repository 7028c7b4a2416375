package org.apache.spark.shuffle.sluice.ui

import scala.xml.{Node, Text}

import io.sluice.metrics.{BackPressureLevel, MetricNames, TaskBackPressure}
import jakarta.servlet.http.HttpServletRequest
import org.apache.spark.shuffle.sluice.SparkListenerSluiceStageMetrics
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.shuffle.sluice.internal.SparkInternals.{bytesToString, formatDate, uiLink}
import org.apache.spark.shuffle.sluice.metrics.{NodeServiceStatus, NodeServicesView, SluiceEventPublisher, StageView}
import org.json4s.JValue

/**
 * The Sluice tab's page: per executor its network memory segments; per stage the backpressure
 * level (coloured as in Flink's UI: OK green, LOW orange, HIGH red; grey when never sampled),
 * pool usages, bytes and buffers in and out, the buffer fill rate with a suggested buffer
 * timeout, and the root-cause sentence (pipelined stages) or the batch diagnosis (batch stages,
 * with a table of where their time went); the node shuffle services and whom they serve (a running
 * application's); with `?stage=<id>`, that stage's tasks. In a running
 * application, showing the page starts a backpressure sample of every running stage (cached for
 * spark.sluice.backpressure.refreshInterval), as Flink's backpressure tab does; the next refresh
 * shows the result. In the History Server the same page shows the figures replayed from the event
 * log ([[SluiceTabData]]). Spark's UI frames it ([[SparkInternals.attachUiTab]]).
 */
private[sluice] final class SluicePage(data: SluiceTabData) extends SparkInternals.UiPage {

  override def title: String = SluiceTab.Name

  override def renderJson(request: HttpServletRequest): JValue = data.json

  override def render(request: HttpServletRequest): Seq[Node] = {
    data.live.foreach(_.requestRunningStages())
    val stages = data.stages
    val selected = Option(request.getParameter("stage")).flatMap(_.toIntOption)
    <div>
      <p>
        Flink's network metrics of Sluice's shuffles.
        {
      data.settings.map(s =>
        Text(s"Executors report every ${s.reportIntervalMs} ms; buffer timeout " +
          s"${s.bufferTimeoutMs} ms; network buffers of ${bytesToString(s.segmentSize.toLong)}. ")).getOrElse(Text(""))
    }
        {
      if (data.live.isDefined) {
        Text(data.settings.map(s =>
            s"Backpressure is sampled from running tasks' stack traces when this page is " +
              s"shown (${s.backpressureNumSamples} samples, ${s.backpressureDelayMs} ms apart): refresh to see it. ")
            .getOrElse(""))
      } else {
        <span id="sluice-replayed">Replayed from the event log: the last figures the application posted (when
            a stage ended, at most every {SluiceEventPublisher.MinIntervalMs / 1000} s while it ran, and when the
            application ended); task details and sampling exist only while it runs. </span>
      }
    }
        <a href={uiLink(request, s"/${SluiceTab.Prefix}/json")}>JSON</a>
      </p>
      {data.summary.map(s => <p id="sluice-summary"><strong>{s.line}</strong></p>).getOrElse(Seq.empty[Node])}
      <h4>Executors</h4>
      {executorsTable}
      {data.nodeServices.map(nodeServicesTable).getOrElse(Seq.empty[Node])}
      {batchTable(stages.filter(_.batch))}
      <h4>Stages</h4>
      {stagesTable(request, stages)}
      {(for (id <- selected; m <- data.live) yield tasksSection(m.stageView(id))).getOrElse(Seq.empty[Node])}
    </div>
  }

  private def pct(v: Double): String = f"${v * 100}%.0f%%"

  /** Flink's colours: OK green, LOW orange, HIGH red; grey for a stage that was never sampled. */
  private def levelBadge(level: String, ratio: Double, sampled: Boolean): Seq[Node] = {
    val (label, css, colour) =
      if (!sampled) ("n/a", "none", "#999999")
      else level match {
        case BackPressureLevel.High.name => (level, level, "#d9534f")
        case BackPressureLevel.Low.name => (level, level, "#f0ad4e")
        case _ => (level, level, "#5cb85c")
      }
    <span class={s"sluice-level sluice-level-$css"}
          style={s"background-color:$colour;color:white;padding:2px 6px;border-radius:3px;font-weight:bold"}>
      {label}</span> ++ Text(if (sampled) f" $ratio%.2f" else " not sampled")
  }

  private def stagesTable(request: HttpServletRequest, stages: Seq[SparkListenerSluiceStageMetrics]): Seq[Node] =
    <table id="sluice-stages" class="table table-bordered table-condensed table-striped">
      <thead><tr>
        <th>Stage</th><th>Status</th><th>Tasks (running / reported)</th><th>Backpressure</th>
        <th title={MetricNames.OutPoolUsage}>outPoolUsage</th>
        <th title="inPoolUsage (floatingBuffersUsage / exclusiveBuffersUsage)">inPoolUsage (floating / exclusive)</th>
        <th>Records out / in</th>
        <th title="numBytesOut / numBytesIn (as serialised, before compression)">Bytes out / in</th>
        <th title="numBytesInLocal / numBytesInRemote (as sent: compressed when stored compressed)">
          Bytes in local / remote</th>
        <th>Buffers out / in local / remote</th><th>Buffer fill rate</th><th>Suggested buffer timeout</th>
        <th title="The batch diagnosis of a batch stage; the backpressure sentence of a pipelined one">Cause</th>
      </tr></thead>
      <tbody>{stages.map(v => stageRow(request, v))}</tbody>
    </table>

  private def stageRow(request: HttpServletRequest, v: SparkListenerSluiceStageMetrics): Seq[Node] = {
    val sampling = data.live.exists(_.tracker.isInFlight(v.stageId))
    <tr class="sluice-stage" data-stage-id={v.stageId.toString}
        data-level={if (v.backPressureSampled) v.level else ""}>
      <td>{
      if (data.live.isDefined) <a href={uiLink(request, s"/${SluiceTab.Prefix}/?stage=${v.stageId}")}>{v.stageId}</a>
      else Text(v.stageId.toString)
    }
        {if (v.stageAttemptId > 0) s" (attempt ${v.stageAttemptId})" else ""}<br/><small>{v.name}</small></td>
      <td>{v.status}{if (sampling) " (sampling)" else ""}</td>
      <td>{v.runningTasks} / {v.reportedTasks}</td>
      <td>{levelBadge(v.level, v.ratio, v.backPressureSampled)}</td>
      <td>{pct(v.outPoolUsage)}</td>
      <td>{pct(v.inPoolUsage)} ({pct(v.floatingBuffersUsage)} / {pct(v.exclusiveBuffersUsage)})</td>
      <td>{v.numRecordsOut} / {v.numRecordsIn}</td>
      <td>{bytesToString(v.numBytesOut)} / {bytesToString(v.numBytesIn)}</td>
      <td>{bytesToString(v.numBytesInLocal)} / {bytesToString(v.numBytesInRemote)}</td>
      <td>{v.numBuffersOut} / {v.numBuffersInLocal} / {v.numBuffersInRemote}</td>
      <td>{v.bufferFillRateOption.map(pct).getOrElse("n/a (no remote input)")}</td>
      <td>{v.suggestedBufferTimeoutMsOption.map(t => f"$t%.0f ms").getOrElse("n/a")}</td>
      <td class="sluice-cause">{v.cause}</td>
    </tr>
  }

  private def ms(v: Long): String = if (v < 10000) s"$v ms" else f"${v / 1000.0}%.1f s"

  /** Where each batch stage's time went ([[io.sluice.metrics.BatchDiagnosis]]), and its likely cause. */
  private def batchTable(stages: Seq[SparkListenerSluiceStageMetrics]): Seq[Node] =
    if (stages.isEmpty) Seq.empty
    else <h4>Batch stages: where the time went</h4>
    <table id="sluice-batch" class="table table-bordered table-condensed table-striped">
      <thead><tr>
        <th>Stage</th><th title="Successful tasks Spark reported">Tasks</th>
        <th title="Spark's executor run time, summed over the tasks">Executor run time</th>
        <th title="Spark's fetch wait time: the reduce tasks waited for input">Fetch wait</th>
        <th title="Time tasks waited for the executor's network memory">Buffer wait</th>
        <th title="The reduce partition that read the most shuffle bytes, against the median">Max partition</th>
        <th title="The producing executor the readers waited on most, when one stands out">Slow peer</th>
        <th title="The executor whose tasks were slowest per record read, when one stands out">Slow executor</th>
        <th>Spill</th><th>Cause</th>
      </tr></thead>
      <tbody>{
      stages.map { v =>
        val share = if (v.executorRunTimeMs <= 0) 0.0 else v.fetchWaitMs.toDouble / v.executorRunTimeMs
        val bufferShare = if (v.executorRunTimeMs <= 0) 0.0 else v.bufferWaitMs.toDouble / v.executorRunTimeMs
        <tr class="sluice-batch-stage" data-stage-id={v.stageId.toString}>
          <td>{v.stageId}<br/><small>{v.name}</small></td>
          <td>{v.batchTasks}</td>
          <td>{ms(v.executorRunTimeMs)}</td>
          <td>{ms(v.fetchWaitMs)} ({pct(share)})</td>
          <td>{ms(v.bufferWaitMs)} ({pct(bufferShare)})</td>
          <td>{
          if (v.maxPartitionId < 0) Text("-")
          else {
            val ratio =
              if (v.medianPartitionBytes <= 0) "" else f" (${v.maxPartitionBytes.toDouble / v.medianPartitionBytes}%.1f× median)"
            Text(s"${v.maxPartitionId}: ${bytesToString(v.maxPartitionBytes)}$ratio")
          }
        }</td>
          <td>{if (v.slowProducer.isEmpty) "-" else s"executor ${v.slowProducer} (${ms(v.slowProducerWaitMs)})"}</td>
          <td>{if (v.slowExecutor.isEmpty) "-" else f"executor ${v.slowExecutor} (${v.slowExecutorRatio}%.1f×)"}</td>
          <td>{bytesToString(v.spillBytes)}</td>
          <td class="sluice-batch-cause">{v.cause}</td>
        </tr>
      }
    }</tbody>
    </table>

  private def executorsTable: Seq[Node] =
    <table id="sluice-executors" class="table table-bordered table-condensed table-striped">
      <thead><tr>
        <th>Executor</th><th>{MetricNames.TotalMemorySegments}</th><th>{MetricNames.AvailableMemorySegments}</th>
        <th>{MetricNames.UsedMemorySegments}</th><th>Segment size</th><th>Last report</th>
      </tr></thead>
      <tbody>{
      data.executors.map { e =>
        <tr>
          <td>{e.executorId}</td><td>{e.totalMemorySegments}</td><td>{e.availableMemorySegments}</td>
          <td>{e.usedMemorySegments}</td><td>{bytesToString(e.segmentSize.toLong)}</td>
          <td>{formatDate(e.lastReportMs)}</td>
        </tr>
      }
    }</tbody>
    </table>

  /**
   * The node shuffle services (a running application's): each one's own figures from its last
   * status, the application's map outputs it serves (per shuffle), and the executors whose map
   * outputs it serves, live ones as their reports say and every
   * one registered with it as it says (an executor that is gone, its outputs still served, too).
   */
  private def nodeServicesTable(v: NodeServicesView): Seq[Node] =
    if (v.isEmpty) Seq.empty
    else <h4>Node shuffle services</h4>
    <table id="sluice-node-services" class="table table-bordered table-condensed table-striped">
      <thead><tr>
        <th>Service</th>
        <th title="Executors whose map outputs the service serves: every executor of this application registered with it (gone ones too) and those whose reports name it">Executors served</th>
        <th title="This application's map outputs the service serves, as the driver's MapOutputTracker has them, and per shuffle id">Map outputs</th>
        <th title="Applications registered with the service (any application, not only this one)">Applications</th>
        <th title="Executors registered with the service (any application)">Executors registered</th>
        <th>Connections</th><th>Readers</th><th>Bytes sent</th>
        <th title="Read requests waiting for one of the service's read threads">Queued reads</th>
        <th title="Map output files on the service's disks and their size (any application); this application's in brackets">Disk</th>
        <th>Status as of</th>
      </tr></thead>
      <tbody>{
      v.services.map { s =>
        val reported = v.executors.filter(e => e.host == s.host && e.port == s.port)
        val ids = (s.status.map(_.applicationExecutors).getOrElse(Nil) ++ reported.map(_.executorId)).distinct
          .sortBy(id => (id.toIntOption.getOrElse(Int.MaxValue), id))
        val gone = reported.filterNot(_.live).map(_.executorId).toSet
        def figure(f: NodeServiceStatus => String): String = s.status.map(f).getOrElse("-")
        val perShuffle = s.mapOutputs.toSeq.sortBy(_._1)
        <tr class="sluice-node-service" data-service={s"${s.host}:${s.port}"} data-executors={ids.mkString(",")}
            data-map-outputs={perShuffle.map { case (id, n) => s"$id:$n" }.mkString(",")}>
          <td>{s.host}:{s.port}</td>
          <td>{ids.map(id => if (gone(id)) s"$id (gone)" else id).mkString(", ")}</td>
          <td>{
          if (perShuffle.isEmpty) "0"
          else s"${perShuffle.map(_._2).sum} (" + perShuffle.map { case (id, n) => s"shuffle $id: $n" }.mkString(", ") + ")"
        }</td>
          <td>{figure(_.registeredApplications.toString)}</td>
          <td>{figure(_.registeredExecutors.toString)}</td>
          <td>{figure(_.connections.toString)}</td>
          <td>{figure(_.readers.toString)}</td>
          <td>{figure(st => bytesToString(st.bytesSent))}</td>
          <td>{figure(_.queuedReads.toString)}</td>
          <td>{
          figure(st =>
            s"${st.diskFiles} files, ${bytesToString(st.diskBytes)} (${st.applicationDiskFiles}, " +
              s"${bytesToString(st.applicationDiskBytes)})")
        }</td>
          <td>{s.statusAtMs.map(formatDate).getOrElse("not asked yet")}</td>
        </tr>
      }
    }</tbody>
    </table>

  private def tasksSection(v: StageView): Seq[Node] = {
    val sampled: Map[Long, TaskBackPressure] =
      v.backPressure.map(_.tasks.map(t => t.sample.key.taskAttemptId -> t).toMap).getOrElse(Map.empty)
    <h4>Tasks of stage {v.stageId}</h4>
    <table id="sluice-tasks" class="table table-bordered table-condensed table-striped">
      <thead><tr>
        <th>Task (TID)</th><th>Executor</th><th>Running</th><th>Backpressure</th>
        <th>outPoolUsage</th><th>inPoolUsage</th><th>numRecordsOut</th><th>numRecordsIn</th>
        <th>numBytesOut</th><th>numBytesIn</th><th>numBytesInLocal</th><th>numBytesInRemote</th>
        <th>backPressuredTimeMsPerSecond</th><th>busyTimeMsPerSecond</th><th>idleTimeMsPerSecond</th>
        <th>Latency p50 / p99 (ms)</th>
      </tr></thead>
      <tbody>{
      v.tasks.map { e =>
        val s = e.snapshot
        <tr>
          <td>{s.key.partitionId} ({s.key.taskAttemptId})</td><td>{e.executorId}</td><td>{s.running}</td>
          <td>{
          sampled.get(s.key.taskAttemptId).map(t => levelBadge(t.level.name, t.ratio, sampled = true))
            .getOrElse(Text("not sampled"))
        }</td>
          <td>{pct(s.outPoolUsage)}</td><td>{pct(s.inPoolUsage)}</td>
          <td>{s.numRecordsOut}</td><td>{s.numRecordsIn}</td>
          <td>{bytesToString(s.numBytesOut)}</td><td>{bytesToString(s.numBytesIn)}</td>
          <td>{bytesToString(s.numBytesInLocal)}</td>
          <td>{bytesToString(s.numBytesInRemote)}</td>
          <td>{f"${s.backPressuredTimeMsPerSecond}%.0f"}</td><td>{f"${s.busyTimeMsPerSecond}%.0f"}</td>
          <td>{f"${s.idleTimeMsPerSecond}%.0f"}</td>
          <td>{s.latencyTotal.map(l => f"${l.p50}%.0f / ${l.p99}%.0f").getOrElse("-")}</td>
        </tr>
      }
    }</tbody>
    </table>
  }
}
