package org.apache.spark.shuffle.sluice.internal

import org.apache.spark.SparkConf
import org.apache.spark.shuffle.sluice.SluiceShuffleManager

/**
 * Refuses, at start-up, the Spark cluster features that assume map outputs outlive their
 * executor on a disk some other process can serve. Sluice's map outputs live in the executor that
 * wrote them and are served by that executor's own Sluice server, so:
 *
 *  - the external shuffle service (`spark.shuffle.service.enabled`) cannot serve them, and with
 *    it on Spark keeps a lost executor's outputs registered as if the service still held them;
 *  - push-based shuffle (`spark.shuffle.push.enabled`, SPARK-30602) merges outputs inside those
 *    services;
 *  - dynamic allocation may only release executors whose shuffles are gone, which without the
 *    service is what shuffle tracking (`spark.dynamicAllocation.shuffleTracking.enabled`, on by
 *    default) does;
 *
 * Without this check the external shuffle service setting makes the application hang while its
 * executors retry a service that is not there (local-cluster) or lose outputs silently. (Decommissioning
 * is served: Sluice's block resolver migrates finished map outputs, see ShuffleMigration.) Every problem is named with
 * its key and what to set instead, all in one message. (Sluice's storage plugin is required where
 * it must act on the driver: for the node service, and to delete the fallback storage's copies.) Stateless; called by the blocking manager
 * in every JVM before anything else starts.
 */
private[sluice] object SparkFeatureCheck {

  /** Spark's settings this check reads, resolved with Spark's own defaults. */
  final case class Features(
      shuffleService: Boolean,
      pushBasedShuffle: Boolean,
      dynamicAllocation: Boolean,
      shuffleTracking: Boolean,
      nodeService: Boolean = false,
      shuffleDataIO: String = DefaultShuffleDataIO,
      fallbackStorage: Boolean = false)

  /** Spark's key of the shuffle storage plugin, its default, and Sluice's. */
  val ShuffleDataIOKey = "spark.shuffle.sort.io.plugin.class"
  val DefaultShuffleDataIO = "org.apache.spark.shuffle.sort.io.LocalDiskShuffleDataIO"
  val SluiceShuffleDataIO = "org.apache.spark.shuffle.sluice.SluiceShuffleDataIO"

  /** Throws an IllegalArgumentException naming every unsupported setting in `conf`. */
  def verify(conf: SparkConf): Unit = {
    val found = problems(SparkInternals.clusterFeatures(conf))
    if (found.nonEmpty) {
      throw new IllegalArgumentException(
        s"Sluice (spark.shuffle.manager=${classOf[SluiceShuffleManager].getName}) cannot run with " +
          found.mkString("these settings:\n  - ", "\n  - ", "\n") +
          "To run this application on Spark's own shuffle instead, remove spark.shuffle.manager (see docs/deploying.md).")
    }
  }

  /** One line per unsupported setting: the key, why, and what to set instead. */
  def problems(f: Features): Seq[String] = {
    val found = Seq.newBuilder[String]
    if (f.shuffleService) {
      found += "spark.shuffle.service.enabled=true: the external shuffle service cannot serve Sluice's map " +
        "outputs, which live in the executors that wrote them, and Spark would keep a lost executor's outputs " +
        "registered as if the service still held them. Set spark.shuffle.service.enabled=false; for dynamic " +
        "allocation use spark.dynamicAllocation.shuffleTracking.enabled=true instead. On YARN, where " +
        "spark-defaults.conf often enables it for the NodeManagers' spark_shuffle auxiliary service, pass " +
        "--conf spark.shuffle.service.enabled=false --conf spark.dynamicAllocation.shuffleTracking.enabled=true " +
        "with this application (the auxiliary service can keep serving other applications)."
    }
    if (f.pushBasedShuffle) {
      found += "spark.shuffle.push.enabled=true: push-based shuffle merges map outputs in external shuffle " +
        "services, which cannot read Sluice's. Set spark.shuffle.push.enabled=false."
    }
    if (f.nodeService && f.shuffleDataIO != SluiceShuffleDataIO) {
      found += s"spark.sluice.service.enabled=true with $ShuffleDataIOKey=${f.shuffleDataIO}: Spark learns that the " +
        s"node shuffle service keeps map outputs from Sluice's storage plugin. Set $ShuffleDataIOKey=$SluiceShuffleDataIO " +
        "(sluice.configure and sluice conf do)."
    }
    if (f.fallbackStorage && f.shuffleDataIO != SluiceShuffleDataIO) {
      found += s"spark.storage.decommission.fallbackStorage.path with $ShuffleDataIOKey=${f.shuffleDataIO}: the map " +
        "outputs decommissioning executors copy to the fallback storage are deleted by Sluice's storage plugin when " +
        s"Spark drops their shuffle and when the application ends. Set $ShuffleDataIOKey=$SluiceShuffleDataIO " +
        "(sluice.configure and sluice conf do)."
    }
    if (f.dynamicAllocation && !f.shuffleTracking && !f.nodeService) {
      found += "spark.dynamicAllocation.enabled=true with spark.dynamicAllocation.shuffleTracking.enabled=false: " +
        "without an external shuffle service, shuffle tracking is what keeps executors that hold live Sluice " +
        "map outputs until their shuffle is released. Set spark.dynamicAllocation.shuffleTracking.enabled=true " +
        "(Spark's default), spark.dynamicAllocation.enabled=false, or run Sluice's node shuffle service " +
        "(spark.sluice.service.enabled=true), which keeps map outputs when executors go."
    }
    found.result()
  }
}
