package io.sluice.config

import java.io.File
import java.nio.charset.StandardCharsets
import java.nio.file.Files

import io.sluice.NettyLeakDetection
import org.scalatest.funsuite.AnyFunSuite

/** The generated docs, Python option table and spark-submit template are what the code defines. */
class ConfigDocsSuite extends AnyFunSuite with NettyLeakDetection {

  private lazy val repoRoot: File = {
    var dir = new File(".").getAbsoluteFile
    while (dir != null && !new File(dir, "settings.gradle").isFile) dir = dir.getParentFile
    assert(dir != null, s"no settings.gradle above ${new File(".").getAbsolutePath}")
    dir
  }

  ConfigDocs.files.foreach { case (rel, expected) =>
    test(s"$rel is up to date (regenerate with dev/gen-config)") {
      val f = new File(repoRoot, rel)
      assert(f.isFile, s"$f is missing")
      val committed = new String(Files.readAllBytes(f.toPath), StandardCharsets.UTF_8)
      if (committed != expected) {
        val firstDiff = committed.split("\n", -1).toSeq.zipAll(expected.split("\n", -1).toSeq, "<none>", "<none>")
          .indexWhere { case (a, b) => a != b }
        fail(s"$rel differs from ConfigDocs at line ${firstDiff + 1}")
      }
    }
  }

  test("every option appears in each generated file") {
    val md = ConfigDocs.markdown
    val py = ConfigDocs.pythonTable
    val conf = ConfigDocs.confTemplate
    SluiceOptions.all.foreach { o =>
      assert(md.contains(s"| `${o.key}` | `${o.defaultString}` | `${o.pythonName}` |"), o.key)
      assert(py.contains(s""""key": "${o.key}", "python": "${o.pythonName}""""), o.key)
      assert(conf.contains(s"# ${o.key} ${o.defaultString}\n"), o.key)
    }
  }

  test("option keys and Python names are unique") {
    assert(SluiceOptions.all.map(_.key).distinct.size == SluiceOptions.all.size)
    assert(SluiceOptions.all.map(_.pythonName).distinct.size == SluiceOptions.all.size)
    assert(SluiceOptions.byKey.size == SluiceOptions.all.size)
  }

  test("the template wraps every description at spaces, never inside a word, within its width") {
    val lines = ConfigDocs.confTemplate.split("\n").toSeq
    SluiceOptions.all.foreach { o =>
      val setting = lines.indexOf(s"# ${o.key} ${o.defaultString}")
      assert(setting > 0, o.key)
      val comment = lines.take(setting).reverse.takeWhile(_.startsWith("# ")).reverse.map(_.stripPrefix("# "))
      // The wrapped lines hold the description's words, each whole, in order.
      assert(comment.mkString(" ").split(" ").toSeq == o.doc.split("\\s+").filter(_.nonEmpty).toSeq, o.key)
      assert(comment.forall(l => l.length <= ConfigDocs.TemplateWidth || !l.contains(' ')), o.key)
    }
    assert(ConfigDocs.wrap("aa bb cc", 5) == Seq("aa bb", "cc"))
    assert(ConfigDocs.wrap("result partition", 4) == Seq("result", "partition"))
  }

  test("Python's metric table lists every metric of MetricNames with its type and source name") {
    val table = ConfigDocs.metricsTable
    assert(table.contains(s""""source": "${io.sluice.metrics.MetricNames.SourceName}""""))
    io.sluice.metrics.MetricNames.Definitions.foreach { d =>
      assert(table.contains(s"""{"name": "${d.name}", "scope": "${d.scope}", "type": "${d.valueType}", """ +
          s""""spark_kind": "${d.sparkKind}"}"""), d.name)
    }
    val names = io.sluice.metrics.MetricNames.Definitions.map(_.name)
    assert(names.distinct == names)
    assert(names.take(io.sluice.metrics.MetricNames.TaskMetrics.size) == io.sluice.metrics.MetricNames.TaskMetrics)
  }
}
