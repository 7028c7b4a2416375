package org.apache.spark.shuffle.sluice.internal

import java.io.File

import org.apache.spark.SparkConf
import org.scalatest.funsuite.AnyFunSuite

/**
 * The identity of the builds the driver checked, which lets an executor on the same builds skip
 * Sluice's check of Spark's internals: what it names, that it matches only the same Spark build and
 * the same jars, and that the driver publishes none when it cannot name a jar.
 */
class CheckedBuildSuite extends AnyFunSuite {

  private val loader = getClass.getClassLoader
  private val core = "org.apache.spark.SparkContext"
  private val network = "org/apache/spark/network/TransportContext"

  private def jar(className: String): File =
    new File(Class.forName(className.replace('/', '.'), false, loader).getProtectionDomain.getCodeSource.getLocation.toURI)

  test("the identity names Spark's build and each jar's name and size, one class per jar, and matches itself") {
    val identity = CheckedBuild.of(Seq(network, core, "org.apache.spark.SparkConf"), loader).get
    val parts = identity.split(';').toSeq
    assert(parts.head == "v1", identity)
    assert(parts(1) == s"${org.apache.spark.SPARK_VERSION}@${org.apache.spark.SPARK_REVISION}", identity)
    // SparkContext and SparkConf share spark-core's jar: the first of them by name stands for it.
    assert(
      parts.drop(2) == Seq(
        s"org.apache.spark.SparkConf=${jar(core).getName}:${jar(core).length()}",
        s"org.apache.spark.network.TransportContext=${jar(network).getName}:${jar(network).length()}"), identity)
    assert(jar(core).getName.startsWith("spark-core"), identity)
    assert(CheckedBuild.matches(identity, loader))
  }

  test("another size of a jar, another Spark build, a class in another jar or a malformed identity does not match") {
    val identity = CheckedBuild.of(Seq(core, network), loader).get
    val size = jar(core).length()
    val biggerJar = identity.replace(s"${jar(core).getName}:$size", s"${jar(core).getName}:${size + 1}")
    assert(biggerJar != identity)
    assert(!CheckedBuild.matches(biggerJar, loader))
    val otherBuild = identity.replace(s"@${org.apache.spark.SPARK_REVISION}", "@0123abc")
    assert(otherBuild != identity)
    assert(!CheckedBuild.matches(otherBuild, loader))
    val renamedJar = identity.replace(jar(network).getName, "spark-network-common_2.13-4.3.1.jar")
    assert(!CheckedBuild.matches(renamedJar, loader))
    val missingClass = identity.replace(core, "org.apache.spark.SparkContextOfSpark9")
    assert(!CheckedBuild.matches(missingClass, loader))
    for (bad <- Seq("", "v1", s"v2${identity.drop(2)}", identity.split(';').take(2).mkString(";"), identity + ";x"))
      assert(!CheckedBuild.matches(bad, loader), bad)
  }

  test("a class loaded from a directory gives no identity, and the driver then publishes none") {
    assert(jar(getClass.getName).isDirectory, "this suite's classes come from a directory")
    assert(CheckedBuild.of(Seq(core, getClass.getName), loader).isEmpty)
    // Here Sluice's own classes come from a directory too: a stale identity is removed, not kept.
    assert(jar(SparkInternalsCheck.getClass.getName).isDirectory)
    val conf = new SparkConf(false).set(CheckedBuild.Key, "v1;stale")
    SparkInternalsCheck.verifyOnDriver(conf)
    assert(!conf.contains(CheckedBuild.Key))
  }
}
