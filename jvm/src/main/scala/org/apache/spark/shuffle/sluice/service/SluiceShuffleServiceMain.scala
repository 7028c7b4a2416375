package org.apache.spark.shuffle.sluice.service

import java.io.{File, FileInputStream, InputStreamReader}
import java.nio.charset.StandardCharsets
import java.util.Properties
import java.util.concurrent.CountDownLatch

import scala.jdk.CollectionConverters._

import io.sluice.config.SluiceOptions
import io.sluice.service.ShuffleService
import org.apache.spark.shuffle.sluice.ClassPreloader
import org.apache.spark.shuffle.sluice.internal.SparkInternals

/**
 * The Sluice shuffle service as a daemon, one per host (standalone clusters, Kubernetes'
 * DaemonSet; YARN runs [[SluiceYarnShuffleService]] inside its NodeManagers instead), the way
 * Spark's `ExternalShuffleService` runs beside a standalone Worker:
 * {{{
 *   java -cp <sluice jar>:<Spark's jars>/'*' org.apache.spark.shuffle.sluice.service.SluiceShuffleServiceMain \
 *     [--properties-file FILE] [--conf KEY=VALUE]... [--host ADDRESS]
 * }}}
 * (`sluice shuffle-service` runs it). It binds spark.sluice.service.port on `--host` (default:
 * SPARK_LOCAL_IP, else every address), prints one line `Sluice shuffle service listening on
 * HOST:PORT` when it serves, and runs until it is stopped (SIGTERM, SIGINT); applications' files
 * stay on disk then, for a restarted service or the platform to clean up. Applications whose
 * driver it stops hearing from are removed after spark.sluice.service.applicationTimeout. Its
 * metrics go to the sinks spark.metrics.conf configures for instance `shuffleService`. Once it
 * listens, a [[ClassPreloader]] loads the classes of its serving path on a daemon thread.
 */
object SluiceShuffleServiceMain {

  private val Usage =
    "usage: SluiceShuffleServiceMain [--properties-file FILE] [--conf KEY=VALUE]... [--host ADDRESS]\n" +
      "       SluiceShuffleServiceMain --status HOST:PORT [--properties-file FILE] [--conf KEY=VALUE]..."

  def main(args: Array[String]): Unit = {
    // Spark's own default logging (INFO and above to stderr), unless the operator gives a configuration.
    if (System.getProperty("log4j2.configurationFile") == null) {
      System.setProperty("log4j2.configurationFile", "org/apache/spark/log4j2-defaults.properties")
    }
    val status = args.indexOf("--status")
    if (status >= 0) {
      if (status + 1 >= args.length) { System.err.println(Usage); sys.exit(2) }
      sys.exit(printStatus(args(status + 1), args.patch(status, Nil, 2).toList))
    }
    val (props, host) =
      try parse(args.toList)
      catch {
        case e: IllegalArgumentException =>
          System.err.println(s"${e.getMessage}\n$Usage")
          sys.exit(2)
      }
    val daemon =
      try serve(props, host)
      catch {
        case e: IllegalArgumentException =>
          System.err.println(s"Sluice shuffle service: ${e.getMessage}")
          sys.exit(2)
      }
    val stopped = new CountDownLatch(1)
    Runtime.getRuntime.addShutdownHook(new Thread(() => {
        daemon.stop()
        stopped.countDown()
      }, "sluice-service-stop"))
    println(s"Sluice shuffle service listening on $host:${daemon.port}")
    System.out.flush()
    stopped.await()
  }

  /**
   * The service `props` configure, bound to `host` and serving, with its metrics system started
   * ([[DaemonMetricsSource]]) and its serving classes loading; fails naming the setting that is wrong.
   */
  def serve(props: Map[String, String], host: String): Daemon = {
    val service = ServiceConfiguration.service(props, host)
    val port = service.start()
    val metrics =
      try DaemonMetricsSource.start(service, props)
      catch { case e: Throwable => service.stop(deleteFiles = false); throw e }
    val preloader = ClassPreloader.forNodeService()
    preloader.start()
    new Daemon(service, port, metrics, preloader)
  }

  /** A serving daemon: its service, its port, its metrics system and its class preloader. */
  final class Daemon private[SluiceShuffleServiceMain] (val service: ShuffleService, val port: Int,
      metrics: SparkInternals.OwnMetricsSystem, preloader: ClassPreloader) {

    /** Stops the preloader, the metrics system, then the service; the applications' files stay. Idempotent. */
    def stop(): Unit = synchronized {
      if (!stopped) {
        stopped = true
        preloader.stop(ClassPreloader.StopTimeoutMs)
        try metrics.stop()
        finally service.stop(deleteFiles = false)
      }
    }

    private var stopped = false
  }

  /**
   * Prints the metrics of the service at `address` (HOST:PORT) as JSON: registered applications and
   * executors, connections, readers, bytes sent, queued reads, disk; 0 when it answered, 1 when not.
   * A service with spark.authenticate answers only an application's authenticated clients.
   */
  private def printStatus(address: String, rest: List[String]): Int = {
    val at = address.lastIndexOf(':')
    val port = if (at > 0) address.substring(at + 1).toIntOption else None
    if (port.isEmpty) { System.err.println(s"--status $address: expected HOST:PORT"); return 2 }
    val (props, _) = parse(rest)
    val transportConf = new org.apache.spark.network.util.TransportConf("sluice",
      new org.apache.spark.network.util.MapConfigProvider(props.filter(e => ServiceConfiguration.relevant(e._1)).asJava))
    val client = new io.sluice.service.ShuffleServiceClient(transportConf, "", None, 30000L)
    try { println(client.status(address.substring(0, at), port.get)); 0 }
    catch { case e: java.io.IOException => System.err.println(e.getMessage); 1 }
    finally client.close()
  }

  /** The properties (file first, then `--conf`s) and the bind address `args` give. */
  def parse(args: List[String], env: String => Option[String] = sys.env.get): (Map[String, String], String) = {
    var props = Map.empty[String, String]
    var confs = Map.empty[String, String]
    var host = env("SPARK_LOCAL_IP").filter(_.nonEmpty).getOrElse("0.0.0.0")
    var rest = args
    while (rest.nonEmpty) rest match {
      case "--properties-file" :: file :: more => props = load(new File(file)); rest = more
      case "--conf" :: kv :: more =>
        val eq = kv.indexOf('=')
        if (eq <= 0) throw new IllegalArgumentException(s"--conf $kv: expected KEY=VALUE")
        confs += kv.substring(0, eq).trim -> kv.substring(eq + 1).trim
        rest = more
      case "--host" :: h :: more => host = h; rest = more
      case other :: _ => throw new IllegalArgumentException(s"unknown argument $other")
      case Nil => ()
    }
    val all = props ++ confs
    all.keys.filter(k =>
      k.startsWith("spark.sluice.") && !SluiceOptions.byKey.contains(k) &&
        !k.startsWith("spark.sluice.io.")).foreach { k =>
      throw new IllegalArgumentException(s"unknown setting $k (see Sluice's docs/configuration.md)")
    }
    (all, host)
  }

  private def load(file: File): Map[String, String] = {
    if (!file.isFile) throw new IllegalArgumentException(s"--properties-file $file: no such file")
    val p = new Properties()
    val in = new InputStreamReader(new FileInputStream(file), StandardCharsets.UTF_8)
    try p.load(in)
    finally in.close()
    p.stringPropertyNames().asScala.map(k => k -> p.getProperty(k).trim).toMap
  }
}
