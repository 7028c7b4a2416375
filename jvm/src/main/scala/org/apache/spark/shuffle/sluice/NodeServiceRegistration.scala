package org.apache.spark.shuffle.sluice

import java.io.File
import java.nio.file.Files
import java.nio.file.attribute.PosixFilePermissions

import scala.util.control.NonFatal

import io.sluice.NodeServiceAddress
import io.sluice.config.{ServiceOptions, SluiceConf}
import io.sluice.service.{ApplicationRegistry, ShuffleServiceClient}
import org.apache.spark.SparkConf
import org.apache.spark.internal.Logging
import org.apache.spark.network.sasl.SecretKeyHolder
import org.apache.spark.network.util.TransportConf

/**
 * An executor's registration with its node's Sluice shuffle service (spark.sluice.service.enabled),
 * as Spark's BlockManager registers with its external shuffle service at start: it makes the
 * executor's own Sluice dirs under Spark's local root dirs (outside the BlockManager's, which
 * Spark deletes when the executor stops), registers the application and those dirs with the
 * service, and tells the driver which service holds the application's outputs
 * ([[rpc.NodeServices]]). Called once per executor, on the thread starting its environment.
 */
private[sluice] object NodeServiceRegistration extends Logging {

  /** The environment variable that names the node's service address (Kubernetes: the pod's status.hostIP). */
  val HostEnv = "SLUICE_SERVICE_HOST"

  /**
   * The environment variable that names the node's service port (Kubernetes: from the ConfigMap the
   * service's DaemonSet reads its port from, so that the port is set in one place).
   */
  val PortEnv = "SLUICE_SERVICE_PORT"

  /** Where an executor writes its blocking partitions, and the service that serves them (None: the executor does). */
  final case class Outcome(dirs: Seq[File], service: Option[NodeServiceAddress])

  /**
   * The node service's address for an executor on `executorHost`: SLUICE_SERVICE_HOST, else
   * spark.sluice.service.host, else the executor's host; SLUICE_SERVICE_PORT, else
   * spark.sluice.service.port. An IllegalArgumentException naming the variable when it is no port.
   */
  def serviceAddress(conf: SluiceConf, executorHost: String, env: String => Option[String] = sys.env.get): NodeServiceAddress = {
    val host = env(HostEnv).filter(_.nonEmpty).orElse(Some(conf.get(ServiceOptions.ServiceHost)).filter(_.nonEmpty))
      .getOrElse(executorHost)
    val port = env(PortEnv).map(_.trim).filter(_.nonEmpty).map { p =>
      p.toIntOption.filter(n => n >= 1 && n <= 65535).getOrElse(throw new IllegalArgumentException(
          s"$PortEnv=$p is not a port (1 to 65535): it names the port of this node's Sluice shuffle service, " +
            s"instead of ${ServiceOptions.ServicePort.key}"))
    }
    NodeServiceAddress(host, port.getOrElse(conf.get(ServiceOptions.ServicePort)))
  }

  /** The executor's Sluice dirs: one per local root dir, named after the application and the executor. */
  def dirsFor(roots: Seq[File], appId: String, executorId: String): Seq[File] =
    roots.map(r => new File(r.getAbsoluteFile, s"${ApplicationRegistry.DirPrefix}$appId-$executorId").toPath.normalize().toFile)

  /**
   * Lets the service, which may run as another user of the application dirs' group (YARN's
   * NodeManager under the LinuxContainerExecutor), list `dir` and delete a dropped shuffle's files
   * in it: rwxrwx---, as Spark's DiskBlockManager makes its dirs when its external shuffle service
   * removes blocks (SPARK-37618). The files in it stay as the executor's umask makes them.
   */
  private[sluice] def shareWithService(dir: File): Unit =
    try Files.setPosixFilePermissions(dir.toPath, PosixFilePermissions.fromString("rwxrwx---"))
    catch { case _: UnsupportedOperationException => () } // not a POSIX file system

  /**
   * How an executor registers, from Spark's settings for registering with its external shuffle
   * service: each attempt waits `timeoutMs` for the answer (spark.shuffle.registration.timeout),
   * `maxAttempts` in all (spark.shuffle.registration.maxAttempts), `retryWaitMs` apart (Spark's
   * BlockManager waits 5 s), so a service that restarts as the executor starts (a NodeManager's
   * rolling restart) costs a few seconds rather than the executor.
   */
  final case class Attempts(timeoutMs: Long, maxAttempts: Int, retryWaitMs: Long = 5000L)

  object Attempts {

    /** From Spark's settings; at least one attempt of at least a millisecond, whatever they say. */
    def of(conf: SparkConf): Attempts =
      Attempts(math.max(1L, conf.getTimeAsMs("spark.shuffle.registration.timeout", "5000ms")),
        math.max(1, conf.getInt("spark.shuffle.registration.maxAttempts", 3)))
  }

  /**
   * Registers executor `executorId` of `appId` with its node's service when the service is on,
   * trying as `attempts` says; else, or when every attempt failed and
   * spark.sluice.service.fallbackToExecutor allows, the executor serves its own outputs from
   * `blockManagerDirs`. A failure otherwise stops the executor with an error naming the service and
   * the last attempt's failure.
   */
  def register(conf: SluiceConf, transportConf: TransportConf, appId: String, executorId: String, executorHost: String,
      roots: Seq[File], blockManagerDirs: Seq[File], secret: Option[SecretKeyHolder], attempts: Attempts,
      announce: (NodeServiceAddress, String, Seq[String]) => Unit): Outcome = {
    if (!conf.get(ServiceOptions.ServiceEnabled)) return Outcome(blockManagerDirs, None)
    val service = serviceAddress(conf, executorHost)
    val dirs = dirsFor(roots, appId, executorId)
    val startNanos = System.nanoTime()
    try {
      dirs.foreach { d =>
        if (!d.isDirectory && !d.mkdirs() && !d.isDirectory) throw new java.io.IOException(s"cannot create $d")
        shareWithService(d)
      }
      val client = new ShuffleServiceClient(transportConf, appId, secret, attempts.timeoutMs)
      try {
        ShuffleServiceClient.attempting(attempts.maxAttempts, _ => attempts.retryWaitMs) { (attempt, e) =>
          logWarning(s"Executor $executorId could not register with the Sluice shuffle service at " +
            s"${service.host}:${service.port} (attempt $attempt of ${attempts.maxAttempts}, " +
            s"spark.shuffle.registration.maxAttempts): ${e.getMessage}; trying again in ${attempts.retryWaitMs}ms")
        }(client.registerExecutor(service.host, service.port, executorId, dirs.map(_.getPath)))
      } finally client.close()
      announce(service, executorId, dirs.map(_.getPath))
      logInfo(s"Executor $executorId registered ${dirs.mkString(", ")} with the Sluice shuffle service at " +
        s"${service.host}:${service.port}, which serves its map outputs (in ${(System.nanoTime() - startNanos) / 1000000L}ms)")
      Outcome(dirs, Some(service))
    } catch {
      case NonFatal(e) if conf.get(ServiceOptions.ServiceFallbackToExecutor) =>
        logWarning(s"Executor $executorId serves its own map outputs (they die with it): ${e.getMessage} " +
          s"(${ServiceOptions.ServiceFallbackToExecutor.key}=true)")
        dirs.foreach(d => d.delete())
        Outcome(blockManagerDirs, None)
      case NonFatal(e) =>
        throw new IllegalStateException(
          s"Executor $executorId could not register with the Sluice shuffle service at " +
            s"${service.host}:${service.port} (${ServiceOptions.ServiceEnabled.key}=true): ${e.getMessage}. Start the " +
            s"service on every node (see Sluice's docs/deploying.md), or set ${ServiceOptions.ServiceFallbackToExecutor.key}" +
            "=true to let executors serve their own map outputs when it is not there.", e)
    }
  }
}
