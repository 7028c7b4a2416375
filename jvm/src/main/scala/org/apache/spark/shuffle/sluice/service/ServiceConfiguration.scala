package org.apache.spark.shuffle.sluice.service

import java.io.File

import scala.jdk.CollectionConverters._

import io.sluice.config.{ServiceOptions, SluiceConf, SluiceOptions}
import io.sluice.service.{ServiceSettings, ShuffleService}
import org.apache.spark.network.util.{MapConfigProvider, TransportConf}
import org.apache.spark.shuffle.sluice.internal.{SparkInternals, TransportConfOverlay}

/**
 * A node shuffle service's settings, from the properties its platform gives it (the daemon's
 * properties file and `--conf`s, or YARN's yarn-site.xml): Sluice's own (`spark.sluice.*`: the
 * service's port, timeout and allowed dirs, and its transport's network settings) and Spark's that
 * guard its connections (spark.authenticate, spark.network.crypto.*, spark.ssl.rpc.*, the module's
 * spark.sluice.io.*), read as Spark's external shuffle service reads them. Stateless.
 */
object ServiceConfiguration {

  /** The keys a service reads: Sluice's, and Spark's security and transport settings. */
  def relevant(key: String): Boolean =
    key.startsWith("spark.sluice.") || key == "spark.authenticate" || key.startsWith("spark.network.crypto.") ||
      key.startsWith("spark.ssl.") || key == "spark.network.timeout"

  /**
   * A service over `props`, bound to `bindHost`, that admits an application only when `admit` says
   * so and reads dirs under `allowedRoots` (added to spark.sluice.service.allowedDirs). Fails naming
   * the key of a bad value.
   */
  def service(props: Map[String, String], bindHost: String, admit: String => Option[String] = _ => None,
      allowedRoots: Seq[File] = Nil, applicationTimeoutMs: Option[Long] = None,
      recoveryDir: Option[File] = None): ShuffleService = {
    val settings = props.filter { case (k, _) => relevant(k) }
    val sluice = SluiceConf(settings.filter(_._1.startsWith("spark.sluice.")).toSeq)
    val transportConf = TransportConfOverlay(new TransportConf("sluice", new MapConfigProvider(settings.asJava)), sluice)
    val roots = sluice.get(ServiceOptions.ServiceAllowedDirs).split(',').map(_.trim).filter(_.nonEmpty).map(new File(_)) ++
      allowedRoots
    roots.foreach { r =>
      if (!r.isAbsolute) throw new IllegalArgumentException(s"${ServiceOptions.ServiceAllowedDirs.key}: $r is not absolute")
    }
    val serviceSettings = ServiceSettings(
      authenticate = settings.get("spark.authenticate").exists(_.trim.toBoolean),
      applicationTimeoutMs = applicationTimeoutMs.getOrElse(sluice.get(ServiceOptions.ServiceApplicationTimeout)),
      allowedRoots = roots.map(r => r.toPath.toAbsolutePath.normalize().toFile).toSeq,
      maxOpenFiles = sluice.get(SluiceOptions.MaxOpenPartitionFiles),
      indexCacheBytes = sluice.get(SluiceOptions.IndexCacheSize),
      recoveryDir = recoveryDir.orElse(Some(sluice.get(ServiceOptions.ServiceRecoveryDir)).filter(_.nonEmpty).map(new File(_))))
    new ShuffleService(sluice, transportConf, serviceSettings, bindHost, SparkInternals.TransportPipeline, admit)
  }
}
