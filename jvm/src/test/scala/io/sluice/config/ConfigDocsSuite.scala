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
}
