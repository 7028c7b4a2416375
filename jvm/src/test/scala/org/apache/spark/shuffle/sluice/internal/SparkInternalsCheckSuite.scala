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
 * version and what changed); and the boundary's rule: outside the adapter package
 * (`org.apache.spark.shuffle.sluice.internal`), Sluice's classes, engine included, use only
 * Spark's API and the internal uses [[SparkInternalsAllowlist]] lists with their reasons. Which
 * Spark classes and members are internal is [[SparkApiVisibility]]'s rule (Scala `private[x]`,
 * Java classes without Spark's API annotations, packages named `internal`), applied to every
 * class and member a Sluice class links or names in its declarations.
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

  /** Class files under `pkg` of the directory the main classes were compiled to, by JVM class name. */
  private def classFiles(pkg: String): Seq[(String, Array[Byte])] = {
    val root = new File(classOf[SluiceShuffleManager].getProtectionDomain.getCodeSource.getLocation.toURI)
    assert(root.isDirectory, s"$root: the main classes are expected in a directory")
    def walk(f: File): Seq[File] = if (f.isDirectory) f.listFiles().toSeq.flatMap(walk) else Seq(f)
    walk(new File(root, pkg)).filter(_.getName.endsWith(".class")).map { f =>
      root.toPath.relativize(f.toPath).toString.stripSuffix(".class").replace(File.separatorChar, '.') ->
      Files.readAllBytes(f.toPath)
    }.sortBy(_._1)
  }

  private val AdapterPackage = "org.apache.spark.shuffle.sluice.internal."

  /**
   * One use of a Spark internal: `user` (a Sluice class; its nested and anonymous classes count as
   * it) links or names `reference`, which is internal because `why`.
   */
  private final class InternalUse(val user: String, val reference: Reference, val why: String) {
    def spark: String = reference.owner.replace('/', '.')
    def member: String = if (reference.isClass) "" else reference.name
  }

  /** The uses, one line per user and Spark class: `user uses class (why): member, member`. */
  private def describe(uses: Seq[InternalUse]): String =
    uses.groupBy(u => (u.user, u.spark, u.why)).toSeq.sortBy(_._1).map { case ((user, spark, why), us) =>
      val members = us.map(_.member).filter(_.nonEmpty).distinct.sorted
      s"  $user uses $spark ($why)${if (members.isEmpty) "" else members.mkString(": ", ", ", "")}"
    }.mkString("\n")

  /** Every use of a Spark internal by Sluice's main classes outside the adapter package. */
  private lazy val internalUses: Seq[InternalUse] = {
    val visibility = new SparkApiVisibility(getClass.getClassLoader)
    val files = (classFiles("io/sluice") ++ classFiles("org/apache/spark/shuffle/sluice"))
      .filterNot { case (name, _) => name.startsWith(AdapterPackage) }
    assert(files.size > 100, files.size)
    for {
      (name, bytes) <- files
      r <- (SparkInternalsCheck.classReferences(bytes) ++
        SparkInternalsCheck.declaredTypes(bytes).map(Reference(_, "", "", isField = false))).distinct
      why <- visibility.internal(r)
    } yield new InternalUse(name.takeWhile(_ != '$'), r, why)
  }

  /** Whether the allowlist entry `a` allows `use` by the user (class or `package.**`) `user`. */
  private def covers(a: SparkInternalsAllowlist.Allowed, user: String, use: InternalUse): Boolean = {
    val spark = a.spark.split('#') match {
      case Array(cls) => use.spark == cls
      case Array(cls, member) => use.spark == cls && use.member == member
    }
    spark && (if (user.endsWith(".**")) use.user.startsWith(user.stripSuffix("**")) else use.user == user)
  }

  test("the rule tells Spark's internals from its API") {
    val v = new SparkApiVisibility(getClass.getClassLoader)
    def cls(name: String) = v.classInternal(name.replace('.', '/'))
    assert(cls("org.apache.spark.shuffle.sort.SortShuffleManager").contains("private[spark]"))
    assert(cls("org.apache.spark.scheduler.MapStatus$").contains("private[spark]"))
    assert(cls("org.apache.spark.util.Utils$").contains("private[spark]"))
    assert(cls("org.apache.spark.network.util.TransportConf").contains("Java class not annotated as API"))
    assert(cls("org.apache.spark.internal.Logging").contains("in package org.apache.spark.internal"))
    assert(cls("org.apache.spark.shuffle.api.ShuffleExecutorComponents").contains("Java class annotated @Private"))
    assert(cls("org.apache.spark.SparkConf").isEmpty)
    assert(cls("org.apache.spark.TaskContext").isEmpty)
    assert(cls("org.apache.spark.api.plugin.SparkPlugin").isEmpty)
    assert(cls("org.apache.spark.sql.connector.catalog.TableProvider").isEmpty)
    val taskMetrics = Reference("org/apache/spark/TaskContext", "taskMetrics", "()Lorg/apache/spark/executor/TaskMetrics;",
      isField = false)
    assert(v.internal(taskMetrics).isEmpty, v.internal(taskMetrics))
    val getAppId = Reference("org/apache/spark/SparkConf", "getAppId", "()Ljava/lang/String;", isField = false)
    assert(v.internal(getAppId).isEmpty, v.internal(getAppId))
    val getenv = Reference("org/apache/spark/SparkConf", "getenv", "(Ljava/lang/String;)Ljava/lang/String;", isField = false)
    assert(v.internal(getenv).contains("private[spark]"), v.internal(getenv))
  }

  test("outside the adapter package, Sluice uses only Spark's API and the internals on the allowlist") {
    val allowed = SparkInternalsAllowlist.entries
    val unlisted = internalUses.filterNot(u => allowed.exists(a => a.users.exists(covers(a, _, u))))
    if (unlisted.nonEmpty) fail(
      s"Sluice uses Spark internals outside the adapter package ${AdapterPackage.stripSuffix(".")} that " +
        "SparkInternalsAllowlist does not list. Move each use behind SparkInternals, or list it with the reason " +
        s"it cannot be:\n${describe(unlisted)}")
    val stale = for {
      a <- allowed
      user <- a.users if !internalUses.exists(covers(a, user, _))
    } yield s"  ${a.spark} by $user"
    if (stale.nonEmpty)
      fail(s"SparkInternalsAllowlist allows uses no class makes any more; remove them:\n${stale.mkString("\n")}")
    val pairs = for (a <- allowed; user <- a.users) yield (a.spark, user)
    assert(pairs.distinct.size == pairs.size, pairs.diff(pairs.distinct))
    assert(allowed.forall(a => a.reason.trim.nonEmpty && !a.reason.contains('\n')), "every entry needs a one-line reason")
  }

  test("the engine references none of Spark but its network library and Platform, nor Spark's handler names") {
    val files = classFiles("io/sluice").filterNot(_._1.startsWith("io.sluice.bench."))
    assert(files.size > 50)
    val names = SparkInternals.TransportPipeline
    val offending = files.flatMap { case (path, bytes) =>
      val (refs, strings) = SparkInternalsCheck.constants(bytes)
      // SparkPipelineNames' fields are named after the handlers' roles (case-class field names are literals).
      val literals = if (path == "io.sluice.netty.SparkPipelineNames") Nil else strings
      refs.filterNot(r => r.owner.startsWith("org/apache/spark/network/") || r.owner.startsWith("org/apache/spark/unsafe/"))
        .map(r => s"$path uses ${r.describe}") ++
      literals.filter((names.required ++ names.optional).toSet).map(s => s"$path names Spark's handler \"$s\"")
    }
    assert(offending.isEmpty, offending.distinct.mkString("\n"))
  }
}
