package org.apache.spark.shuffle.sluice.internal

import java.io.File
import java.nio.file.Files

import io.sluice.netty.SparkPipelineNames
import org.apache.spark.shuffle.sluice.SluiceShuffleManager
import org.apache.spark.shuffle.sluice.internal.SparkInternalsCheck.Reference
import org.scalatest.funsuite.AnyFunSuite

/**
 * The start-up check of Sluice's assumptions about Spark's internals, against the Spark on the
 * class path (it must pass) and against simulated changes of Spark (it must fail, naming the Spark
 * version and what changed); and the rule that only the adapter touches Spark's private APIs.
 */
class SparkInternalsCheckSuite extends AnyFunSuite {

  private val spark = org.apache.spark.SPARK_VERSION

  test("the running Spark meets every assumption; the check reads the boundary's real references") {
    SparkInternalsCheck.verify()
    SparkInternalsCheck.verifyOnce()
    val refs = SparkInternalsCheck.boundaryReferences()
    // The scan found the adapter's private uses and the SPI, so a check that passes has checked something.
    assert(refs.exists(r => r.owner == "org/apache/spark/shuffle/FetchFailedException" && r.name == "<init>"))
    assert(refs.exists(r =>
        r.owner == "org/apache/spark/util/collection/ExternalSorter" &&
          r.name == "insertAllAndUpdateMetrics"))
    assert(refs.exists(r => r.owner == "org/apache/spark/shuffle/ShuffleWriteMetricsReporter"))
    assert(SparkInternalsCheck.linkProblems(refs).isEmpty)
    assert(SparkInternalsCheck.pipelineProblems(SparkInternals.TransportPipeline).isEmpty)
  }

  test("a renamed handler in Spark's Netty pipeline stops Sluice, naming the handler and the Spark version") {
    val renamed: SparkPipelineNames = SparkInternals.TransportPipeline.copy(frameDecoder = "frameDecoderOfSpark9")
    val problems = SparkInternalsCheck.problems(Nil, renamed)
    assert(problems.size == 2, problems) // server and client pipelines
    assert(problems.forall(_.contains("no handler named frameDecoderOfSpark9")), problems)
    val message = SparkInternalsCheck.failure(spark, problems).getMessage
    assert(message.startsWith("Sluice ") && message.contains(s"cannot run on Spark $spark"), message)
    assert(message.contains("frameDecoderOfSpark9"), message)
  }

  test("a method, field or class gone from Spark, or a changed signature, is reported by name") {
    val problems = SparkInternalsCheck.linkProblems(Seq(
        Reference("org/apache/spark/SparkEnv", "blockManager", "()Lorg/apache/spark/storage/BlockManager;", isField = false),
        Reference("org/apache/spark/SparkEnv", "blockManagerOfSpark9", "()Lorg/apache/spark/storage/BlockManager;",
          isField = false),
        Reference("org/apache/spark/SparkEnv", "executorId", "()Ljava/lang/Integer;", isField = false),
        Reference("org/apache/spark/storage/BlockManagerId", "executorIdOfSpark9", "Ljava/lang/String;", isField = true),
        Reference("org/apache/spark/storage/BlockManagerId", "<init>", "(Ljava/lang/String;)V", isField = false),
        Reference("org/apache/spark/NoSuchClassOfSpark9", "", "", isField = false)))
    assert(
      problems == Seq(
        "class org.apache.spark.NoSuchClassOfSpark9 is missing",
        "method org.apache.spark.SparkEnv.blockManagerOfSpark9()Lorg/apache/spark/storage/BlockManager; is missing",
        "method org.apache.spark.SparkEnv.executorId()Ljava/lang/Integer; is missing",
        "constructor org.apache.spark.storage.BlockManagerId(Ljava/lang/String;)V is missing",
        "field org.apache.spark.storage.BlockManagerId.executorIdOfSpark9 is missing"), problems)
    val message = SparkInternalsCheck.failure("4.3.9", problems).getMessage
    assert(message.contains("cannot run on Spark 4.3.9") && message.contains("blockManagerOfSpark9"), message)
  }

  /** Class files under `pkg` of the directory the main classes were compiled to. */
  private def classFiles(pkg: String): Seq[(String, Array[Byte])] = {
    val root = new File(classOf[SluiceShuffleManager].getProtectionDomain.getCodeSource.getLocation.toURI)
    assert(root.isDirectory, s"$root: the main classes are expected in a directory")
    def walk(f: File): Seq[File] = if (f.isDirectory) f.listFiles().toSeq.flatMap(walk) else Seq(f)
    walk(new File(root, pkg)).filter(_.getName.endsWith(".class")).map { f =>
      root.toPath.relativize(f.toPath).toString -> Files.readAllBytes(f.toPath)
    }
  }

  test("only the adapter uses Spark's private APIs: the rest of the boundary uses the shuffle SPI and public APIs") {
    val privateApis = Seq("org/apache/spark/rpc/", "org/apache/spark/ui/", "org/apache/spark/metrics/",
      "org/apache/spark/util/Utils", "org/apache/spark/util/RpcUtils", "org/apache/spark/util/collection/",
      "org/apache/spark/SparkEnv", "org/apache/spark/MapOutputTracker", "org/apache/spark/SecurityManager",
      "org/apache/spark/shuffle/FetchFailedException", "org/apache/spark/network/netty/",
      "org/apache/spark/executor/TaskMetrics", "org/apache/spark/scheduler/MapStatus$",
      "org/apache/spark/storage/BlockManagerId$", "org/apache/spark/storage/BlockManager;")
    val files = classFiles("org/apache/spark/shuffle/sluice")
      .filterNot { case (path, _) => path.contains("/SparkInternals") || path.contains("/bench/") }
    assert(files.size > 20)
    val offending = for {
      (path, bytes) <- files
      r <- SparkInternalsCheck.classReferences(bytes)
      api <- privateApis if (r.owner + ";").startsWith(api) || r.owner.startsWith(api)
    } yield s"$path uses ${r.describe}"
    assert(offending.isEmpty, offending.distinct.mkString("\n"))
  }

  test("the engine references none of Spark but its network library and Platform, nor Spark's handler names") {
    val files = classFiles("io/sluice").filterNot(_._1.contains("/bench/"))
    assert(files.size > 50)
    val names = SparkInternals.TransportPipeline
    val offending = files.flatMap { case (path, bytes) =>
      val (refs, strings) = SparkInternalsCheck.constants(bytes)
      // SparkPipelineNames' fields are named after the handlers' roles (case-class field names are literals).
      val literals = if (path.contains("/SparkPipelineNames")) Nil else strings
      refs.filterNot(r => r.owner.startsWith("org/apache/spark/network/") || r.owner.startsWith("org/apache/spark/unsafe/"))
        .map(r => s"$path uses ${r.describe}") ++
      literals.filter((names.required ++ names.optional).toSet).map(s => s"$path names Spark's handler \"$s\"")
    }
    assert(offending.isEmpty, offending.distinct.mkString("\n"))
  }
}
