package io.sluice.config

import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path, Paths}

import io.sluice.metrics.MetricNames
import io.sluice.netty.PortRange

/**
 * Renders [[SluiceOptions.all]] into derived artefacts, `docs/configuration.md`, the Python
 * option table `python/sluice/_options.json` (with the [[AtLeast]] rules between options), the
 * typed keywords of `sluice.configure` (`python/sluice/_typed_options.py`) and
 * `conf/sluice.conf.template`; [[SparkSettingRules]] into `python/sluice/_spark_rules.json`
 * (what `sluice doctor` checks); and [[MetricNames.Definitions]] into Python's metric table
 * `python/sluice/_metrics.json`.
 *
 * `main(root)` writes them under a repository root; `main(root, "--check")` fails (exit 1) when a
 * committed copy differs from what the code defines, naming the stale file.
 */
object ConfigDocs {

  def markdown: String = {
    val sb = new StringBuilder
    sb ++= "# Configuration reference\n\n"
    sb ++= "<!-- Generated from io.sluice.config.SluiceOptions by `dev/gen-config`; do not edit by hand. -->\n\n"
    sb ++= "Every Sluice setting is a Spark configuration key under `spark.sluice.`. Set them like any\n"
    sb ++= "Spark setting (`--conf`, `spark-defaults.conf`, `SparkSession.builder.config`) or as snake_case\n"
    sb ++= "keywords of `sluice.configure(builder, ...)` (the *Python* column). Sizes take `k`, `m`, `g`;\n"
    sb ++= "durations take `ms`, `s`, `min`. A bad value stops the executor with an error naming the key.\n\n"
    sb ++= "Sluice also honours Spark's own `spark.authenticate`, `spark.network.crypto.enabled`,\n"
    sb ++= "`spark.ssl.rpc.*`, `spark.shuffle.compress`, `spark.io.compression.codec`, `spark.io.encryption.enabled`\n"
    sb ++= "(blocking partition files encrypted with the application's key; see tuning.md),\n"
    sb ++= "`spark.shuffle.streaming.checksum.enabled` (a CRC32C with every pipelined buffer sent to\n"
    sb ++= "another executor, as Spark's streaming shuffle does), `spark.shuffle.readHostLocalDisk` (on by\n"
    sb ++= "default, off on a local-cluster master unless set, as Spark decides: a reducer reads the map\n"
    sb ++= "outputs of the other executors on its host from their files, with no request, credit or\n"
    sb ++= "connection, once the driver has named their dirs), `spark.shuffle.registration.timeout` and\n"
    sb ++= "`spark.shuffle.registration.maxAttempts` (an executor registering with its node's Sluice shuffle\n"
    sb ++= "service, as with Spark's own), `spark.local.dir`\n"
    sb ++= "and the shuffle dependency's serializer; [security.md](security.md) says what the security\n"
    sb ++= "settings protect and what is open without them.\n\n"
    sb ++= "| Key | Default | Python | Meaning | Flink counterpart | Takes effect |\n"
    sb ++= "|---|---|---|---|---|---|\n"
    SluiceOptions.all.foreach { o =>
      val valid = if (o.checkDoc.nonEmpty) s" Valid: ${o.checkDoc}." else ""
      val values = o.tpe match {
        case ConfigType.EnumType(vs) => s" One of: ${vs.mkString(", ")}."
        case _ => ""
      }
      sb ++= s"| `${o.key}` | `${o.defaultString}` | `${o.pythonName}` | ${o.doc}$values$valid | " +
        s"`${o.flinkOption}` | ${o.takesEffect} |\n"
    }
    sb ++= "\nRules between settings, checked when an executor starts and by `sluice.configure`. A setting you\n"
    sb ++= "leave at its default rises to its bound (a larger segment size raises the frame length with it);\n"
    sb ++= "one you set below it is refused:\n\n"
    AtLeast.all.foreach(r =>
      sb ++= s"- `${r.subject.key}` at least ${r.formula.replace(r.reference.key, s"`${r.reference.key}`")}: ${r.why}.\n")
    sb.toString
  }

  /** A JSON string literal. */
  private def str(s: String): String = "\"" + s.flatMap {
    case '"' => "\\\""
    case '\\' => "\\\\"
    case '\n' => "\\n"
    case c => c.toString
  } + "\""

  def pythonTable: String = {
    val rows = SluiceOptions.all.map { o =>
      val values = o.tpe match {
        case ConfigType.EnumType(vs) => vs.map(str).mkString("[", ", ", "]")
        case _ => "null"
      }
      def num(v: Option[Long]): String = v.fold("null")(_.toString)
      val atLeast = AtLeast.all.filter(_.subject == o).map { r =>
        s"""{"reference": ${str(r.reference.key)}, "factor": ${r.factor}, "plus": ${r.plus}, "why": ${str(r.why)}}"""
      }
      s"""  {"key": ${str(o.key)}, "python": ${str(o.pythonName)}, "type": ${str(o.tpe.name)}, """ +
      s""""default": ${str(o.defaultString)}, "values": $values, "min": ${num(o.bounds.min)}, """ +
      s""""max": ${num(o.bounds.max)}, "power_of_two": ${o.bounds.powerOfTwo}, "valid": ${str(o.checkDoc)}, """ +
      s""""at_least": ${atLeast.mkString("[", ", ", "]")}}"""
    }
    rows.mkString("[\n", ",\n", "\n]\n")
  }

  /**
   * Python's metric table: the source name Spark's metrics system publishes them under, and every
   * metric with its scope, value type and kind in Spark's metrics system.
   */
  def metricsTable: String = {
    val rows = MetricNames.Definitions.map { d =>
      s"""    {"name": ${str(d.name)}, "scope": ${str(d.scope)}, "type": ${str(d.valueType)}, """ +
      s""""spark_kind": ${str(d.sparkKind)}}"""
    }
    s"""{\n  "source": ${str(MetricNames.SourceName)},\n  "metrics": [\n${rows.mkString(",\n")}\n  ]\n}\n"""
  }

  /**
   * The Spark settings Sluice refuses at start-up and those it warns about ([[SparkSettingRules]]),
   * the Spark release line it runs on, and the port-retry setting its server's port range follows ([[PortRange]]).
   */
  def sparkRulesTable: String = {
    def table(rules: Seq[SparkSettingRule]) = rules.map { r =>
      val when = r.when.map(c =>
        s"""{"key": ${str(c.key)}, "default": ${str(c.default)}, "pattern": ${str(c.pattern)}, "negate": ${c.negate}}""")
      s"""    {"id": ${str(r.id)},\n     "when": ${when.mkString("[\n       ", ",\n       ", "]")},\n""" +
      s"""     "problem": ${str(r.problem)},\n     "fix": ${str(r.fix)}}"""
    }.mkString(",\n")
    s"""{\n  "spark_line": ${str(SparkSettingRules.SparkLine)},\n""" +
    s"""  "port_max_retries_key": ${str(PortRange.MaxRetriesKey)},\n""" +
    s"""  "port_max_retries_default": ${PortRange.DefaultMaxRetries},\n""" +
    s"""  "rules": [\n${table(SparkSettingRules.all)}\n  ],\n""" +
    s"""  "warnings": [\n${table(SparkSettingRules.warnings)}\n  ]\n}\n"""
  }

  /** The Python type `sluice.configure` accepts for an option of type `tpe`. */
  private def pythonType(tpe: ConfigType[_]): String = tpe match {
    case ConfigType.EnumType(vs) => vs.map(v => "\"" + v + "\"").mkString("Literal[", ", ", "]")
    case t => t.name match {
        case "int" => "int"
        case "double" => "float"
        case "boolean" => "bool"
        case "bytes" => "Union[int, str]"
        case "duration" => "Union[int, str, datetime.timedelta]"
        case _ => "str"
      }
  }

  /** Every option as a typed keyword of `sluice.configure` and `sluice.spark_conf` (a TypedDict). */
  def typedOptions: String = {
    val sb = new StringBuilder
    sb ++= "\"\"\"The keyword arguments of ``sluice.configure`` and ``sluice.spark_conf``, typed (generated from\n"
    sb ++= "io.sluice.config.SluiceOptions by ``dev/gen-config``; do not edit by hand).\n\n"
    sb ++= "Sizes are bytes as an int, or a string with a unit (``\"32k\"``, ``\"64m\"``); durations are\n"
    sb ++= "milliseconds as an int, a ``datetime.timedelta``, or a string with a unit (``\"10ms\"``, ``\"5s\"``).\n"
    sb ++= "\"\"\"\n\nfrom __future__ import annotations\n\nimport datetime\nfrom typing import Literal, TypedDict, Union\n\n\n"
    sb ++= "class SluiceOptions(TypedDict, total=False):\n"
    sb ++= "    \"\"\"Sluice's options by their Python names; see docs/configuration.md for each.\"\"\"\n\n"
    SluiceOptions.all.foreach { o =>
      sb ++= s"    ${o.pythonName}: ${pythonType(o.tpe)}\n"
      sb ++= s"    \"\"\"``${o.key}``, default ``${o.defaultString}``.\"\"\"\n\n"
    }
    sb.toString.stripSuffix("\n")
  }

  def confTemplate: String = {
    val sb = new StringBuilder
    sb ++= "# Sluice for spark-submit --properties-file (generated from io.sluice.config.SluiceOptions).\n"
    sb ++= "# Copy it, put the jar's path (`sluice jar`) in spark.jars, uncomment what you change.\n\n"
    sb ++= "spark.jars                        /path/to/sluice.jar\n"
    sb ++= "spark.shuffle.manager             org.apache.spark.shuffle.sluice.SluiceShuffleManager\n"
    sb ++= "spark.shuffle.manager.incremental org.apache.spark.shuffle.sluice.SluicePipelinedShuffleManager\n"
    sb ++= "spark.plugins                     org.apache.spark.shuffle.sluice.SluicePlugin\n\n"
    SluiceOptions.all.foreach { o =>
      wrap(o.doc, TemplateWidth).foreach(line => sb ++= s"# $line\n")
      sb ++= s"# ${o.key} ${o.defaultString}\n\n"
    }
    sb.toString
  }

  /** The widest comment text of the template (after `# `). */
  val TemplateWidth = 96

  /**
   * `text` broken into lines of at most `width` characters at spaces, never inside a word (a
   * single word longer than `width` gets a line of its own).
   */
  def wrap(text: String, width: Int): Seq[String] = {
    val lines = Seq.newBuilder[String]
    val line = new StringBuilder
    text.split("\\s+").filter(_.nonEmpty).foreach { word =>
      if (line.nonEmpty && line.length + 1 + word.length > width) {
        lines += line.toString
        line.clear()
      }
      if (line.nonEmpty) line += ' '
      line ++= word
    }
    if (line.nonEmpty) lines += line.toString
    lines.result()
  }

  /** (path relative to the repository root, content) of every generated file. */
  def files: Seq[(String, String)] = Seq(
    "docs/configuration.md" -> markdown,
    "python/sluice/_options.json" -> pythonTable,
    "python/sluice/_metrics.json" -> metricsTable,
    "python/sluice/_spark_rules.json" -> sparkRulesTable,
    "python/sluice/_typed_options.py" -> typedOptions,
    "conf/sluice.conf.template" -> confTemplate)

  def main(args: Array[String]): Unit = {
    val root = Paths.get(args.headOption.getOrElse("."))
    val check = args.contains("--check")
    val stale = files.flatMap { case (rel, content) =>
      val path: Path = root.resolve(rel)
      if (check) {
        val current = if (Files.exists(path)) new String(Files.readAllBytes(path), StandardCharsets.UTF_8) else ""
        if (current != content) Some(rel) else None
      } else {
        Files.createDirectories(path.getParent)
        Files.write(path, content.getBytes(StandardCharsets.UTF_8))
        None
      }
    }
    if (stale.nonEmpty) {
      System.err.println(
        s"Out of date with io.sluice.config.SluiceOptions / io.sluice.metrics.MetricNames: ${stale.mkString(", ")}; run dev/gen-config")
      sys.exit(1)
    }
  }
}
