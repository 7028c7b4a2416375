package org.apache.spark.shuffle.sluice.internal

/**
 * Refuses to start Sluice on a Spark other than the one it was built for. The plugin compiles
 * against Spark 4.3.0 and uses a few of Spark's private APIs (see [[SparkInternals]]), which may
 * change in any release line, so any 4.3.x is accepted and anything else stops the application
 * at start-up with a message naming both versions, instead of failing later inside a task. The
 * first of [[SparkInternalsCheck]]'s checks.
 */
private[sluice] object SparkVersionCheck {

  /** The Spark release line (major.minor) this build of Sluice was compiled and tested against. */
  val BuiltFor: String = io.sluice.config.SparkSettingRules.SparkLine

  /** Throws when the running Spark (`org.apache.spark.SPARK_VERSION`) is not of [[BuiltFor]]. */
  def verify(): Unit = verify(org.apache.spark.SPARK_VERSION)

  def verify(running: String): Unit = {
    val line = running.split('.').take(2).mkString(".")
    if (line != BuiltFor) {
      throw new IllegalStateException(s"Sluice ${SparkVersionCheck.sluiceVersion} was built for Spark $BuiltFor.x, " +
        s"but this is Spark $running; install the Sluice release built for Spark $line, or remove " +
        "spark.shuffle.manager / spark.shuffle.manager.incremental / spark.plugins settings naming Sluice")
    }
  }

  private[sluice] def sluiceVersion: String =
    Option(getClass.getPackage).flatMap(p => Option(p.getImplementationVersion)).getOrElse("(development build)")
}
