package org.apache.spark.shuffle.sluice.internal

import java.io.File

import scala.util.control.NonFatal

/**
 * The identity of the builds a JVM runs Sluice on: Spark's version and revision, and the file name
 * and size of each jar that holds a class Sluice's Spark boundary links (Spark's modules and Sluice's
 * own jar). The driver, once [[SparkInternalsCheck]] passed, publishes it in the application's
 * configuration ([[Key]]), which executors receive when they start; an executor whose own identity
 * is the same runs the classes the driver checked and skips the check (its linking costs about a
 * second of CPU per executor). Anything else (a class loaded from a directory, a jar of another
 * size, another Spark build) means no identity or another one, and the executor checks for itself.
 * Thread-safe.
 */
private[sluice] object CheckedBuild {

  /** Where the driver publishes the identity; executors fetch it with the rest of the driver's settings. */
  val Key = "spark.shuffle.sluice.checkedBuild"

  private val Version = "v1"

  /**
   * The identity of this JVM's Spark and of the jars holding `classNames` (binary names, `a.b.C`,
   * or JVM names, `a/b/C`), one class named per jar; None when one of them is not in a jar file.
   */
  def of(classNames: Seq[String], loader: ClassLoader): Option[String] = {
    val jars = classNames.map(_.replace('/', '.')).distinct.map(name => name -> jarOf(name, loader))
    if (jars.exists(_._2.isEmpty)) None
    else {
      val onePerJar = jars.groupBy(_._2.get).toSeq.map { case (jar, named) => named.map(_._1).min -> jar }.sortBy(_._1)
      Some(render(sparkBuild, onePerJar))
    }
  }

  /**
   * Whether `published` (a driver's [[of]]) names this JVM's Spark and, for each class it names,
   * the same jar file name and size here.
   */
  def matches(published: String, loader: ClassLoader): Boolean =
    published.split(';').toList match {
      case Version :: spark :: classes if spark == sparkBuild && classes.nonEmpty =>
        val named = classes.map(_.split('=')).collect { case Array(name, _) => name }
        named.size == classes.size && {
          val here = named.map(name => jarOf(name, loader))
          here.forall(_.isDefined) && render(sparkBuild, named.zip(here.flatten)) == published
        }
      case _ => false
    }

  private def render(spark: String, onePerJar: Seq[(String, String)]): String =
    (Version +: spark +: onePerJar.map { case (name, jar) => s"$name=$jar" }).mkString(";")

  private def sparkBuild: String =
    s"${org.apache.spark.SPARK_VERSION}@${org.apache.spark.SPARK_REVISION}".replaceAll("[;=]", "_")

  /** `name:size` of the jar file a class is loaded from, without initializing it; None otherwise. */
  private def jarOf(className: String, loader: ClassLoader): Option[String] =
    try {
      val cls = Class.forName(className, false, loader)
      Option(cls.getProtectionDomain.getCodeSource).map(_.getLocation).filter(_.getProtocol == "file")
        .map(url => new File(url.toURI)).filter(f => f.isFile && f.getName.endsWith(".jar"))
        .map(f => s"${f.getName.replaceAll("[;=:]", "_")}:${f.length()}")
    } catch { case NonFatal(_) | _: LinkageError => None }
}
