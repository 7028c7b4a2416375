package org.apache.spark.shuffle.sluice

import java.util.{Map => JMap}

import scala.jdk.CollectionConverters._

import org.apache.spark.shuffle.sluice.metrics.SluiceJson
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.catalog.{SupportsRead, Table, TableCapability, TableProvider}
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.connector.read.{LocalScan, Scan, ScanBuilder}
import org.apache.spark.sql.sources.DataSourceRegister
import org.apache.spark.sql.types.{StringType, StructField, StructType}
import org.apache.spark.sql.util.CaseInsensitiveStringMap
import org.apache.spark.unsafe.types.UTF8String

/**
 * Sluice's metrics as a DataFrame, for clients that reach the driver only through DataFrames:
 * Spark Connect clients, which have no py4j (SPARK-44981 keeps them from the static settings, and
 * Connect's own extension points, SPARK-41629, would need a protocol message of Sluice's own).
 * `spark.read.format("sluice-metrics").option("view", "metrics" | "backpressure").load()` gives one
 * row with one column, `json`: what [[SluiceMetricsAccessor]] gives the classic session over
 * py4j, rendered on the driver when the query is planned (a [[LocalScan]]: no job, no task).
 * Options: `view` (default `metrics`), `wait` (`true`/`false`, for `metrics`) and `stageId`
 * (for `backpressure`, -1 for every stage). Stateless.
 */
class SluiceMetricsDataSource extends TableProvider with DataSourceRegister {

  override def shortName(): String = SluiceMetricsDataSource.ShortName

  override def inferSchema(options: CaseInsensitiveStringMap): StructType = SluiceMetricsDataSource.Schema

  override def getTable(schema: StructType, partitioning: Array[Transform], properties: JMap[String, String]): Table =
    new SluiceMetricsDataSource.MetricsTable
}

private[sluice] object SluiceMetricsDataSource {
  val ShortName = "sluice-metrics"
  val Schema: StructType = StructType(Seq(StructField("json", StringType, nullable = false)))

  /** The JSON the option `view` asks for; a JSON `error` for bad options, as the accessor reports its own. */
  def render(options: Map[String, String]): String = {
    val lower = options.map { case (k, v) => k.toLowerCase(java.util.Locale.ROOT) -> v }
    def error(message: String): String = SluiceJson.render(org.json4s.JObject("error" -> org.json4s.JString(message)))
    lower.getOrElse("view", "metrics") match {
      case "metrics" =>
        lower.getOrElse("wait", "true").toBooleanOption match {
          case Some(wait) => SluiceMetricsAccessor.metricsJson(wait)
          case None => error(s"$ShortName: option wait must be true or false, got ${lower("wait")}")
        }
      case "backpressure" =>
        lower.getOrElse("stageid", "-1").toIntOption match {
          case Some(id) if id >= -1 => SluiceMetricsAccessor.backpressureJson(id)
          case _ => error(s"$ShortName: option stageId must be a stage id or -1 (every stage), got ${lower("stageid")}")
        }
      case other => error(s"$ShortName: option view must be metrics or backpressure, got $other")
    }
  }

  final class MetricsTable extends Table with SupportsRead {
    override def name(): String = ShortName
    override def schema(): StructType = Schema
    override def capabilities(): java.util.Set[TableCapability] = java.util.EnumSet.of(TableCapability.BATCH_READ)
    override def newScanBuilder(options: CaseInsensitiveStringMap): ScanBuilder = {
      val chosen = options.asCaseSensitiveMap().asScala.toMap
      () => new MetricsScan(chosen)
    }
  }

  /** Renders on the driver when Spark plans the read, once per query. */
  final class MetricsScan(options: Map[String, String]) extends LocalScan {
    override def readSchema(): StructType = Schema
    override def rows(): Array[InternalRow] = Array(InternalRow(UTF8String.fromString(render(options))))
  }
}
