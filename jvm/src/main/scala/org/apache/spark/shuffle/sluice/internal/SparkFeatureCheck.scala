package org.apache.spark.shuffle.sluice.internal

import io.sluice.config.SparkSettingRules
import org.apache.spark.SparkConf
import org.apache.spark.shuffle.sluice.SluiceShuffleManager

/**
 * Refuses, at start-up, the Spark settings Sluice cannot honour ([[SparkSettingRules.all]]): the
 * cluster features that assume map outputs outlive their executor on a disk some other process
 * can serve (the external shuffle service, push-based shuffle, dynamic allocation without shuffle
 * tracking without Sluice's node shuffle service), Sluice's node service or Spark's decommissioning
 * fallback storage without Sluice's storage plugin, a compression codec or I/O encryption cipher
 * Sluice has no block form of. Sluice's map outputs live in the executor that wrote them and are
 * served by that executor's own Sluice server; without this check the external shuffle service
 * setting makes the application hang while its executors retry a service that is not there, or
 * lose outputs silently. Every problem is named with its key and what to set instead, all in one
 * message; `sluice doctor` applies the same rules before anything starts. Stateless; called by
 * both managers in every JVM before anything else starts ([[warnings]]: by the driver's storage
 * plugin as the application starts).
 */
private[sluice] object SparkFeatureCheck {

  /** Throws an IllegalArgumentException naming every unsupported setting in `conf`. */
  def verify(conf: SparkConf): Unit = {
    val found = SparkSettingRules.problems(conf.getOption)
    if (found.nonEmpty) {
      throw new IllegalArgumentException(
        s"Sluice (spark.shuffle.manager=${classOf[SluiceShuffleManager].getName}) cannot run with " +
          found.mkString("these settings:\n  - ", "\n  - ", "\n") +
          "To run this application on Spark's own shuffle instead, remove spark.shuffle.manager (see docs/deploying.md).")
    }
  }

  /** What Sluice warns about in `conf` ([[SparkSettingRules.warnings]]): settings that run, and hurt. */
  def warnings(conf: SparkConf): Seq[String] = SparkSettingRules.warningsOf(conf.getOption)
}
