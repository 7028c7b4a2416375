package org.apache.spark.shuffle.sluice.service

import java.io.File
import java.nio.ByteBuffer
import java.util.concurrent.ConcurrentHashMap

import scala.jdk.CollectionConverters._

import io.sluice.service.{ServiceMetrics, ShuffleService}
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.hadoop.yarn.server.api.{
  ApplicationInitializationContext, ApplicationTerminationContext, AuxiliaryService, ContainerInitializationContext,
  ContainerTerminationContext
}
import org.apache.spark.internal.Logging
import org.apache.spark.shuffle.sluice.ClassPreloader

/**
 * The Sluice shuffle service inside a YARN NodeManager, as an auxiliary service (Spark's
 * `YarnShuffleService` is the model). `yarn-site.xml` names it and gives it a class loader of its
 * own over the plugin jar and Spark's jars (a `:`-separated class path, `dir/STAR` for a dir's jars):
 * {{{
 *   yarn.nodemanager.aux-services = ...,sluice_shuffle
 *   yarn.nodemanager.aux-services.sluice_shuffle.class = org.apache.spark.shuffle.sluice.service.SluiceYarnShuffleService
 *   yarn.nodemanager.aux-services.sluice_shuffle.classpath = <sluice jar>:<Spark's jars dir>/STAR
 * }}}
 * and its settings (`spark.sluice.service.port`, spark.authenticate, ...) go in yarn-site.xml too.
 * It serves map outputs from dirs under the NodeManager's local dirs (yarn.nodemanager.local-dirs);
 * an application may register once the NodeManager started a container of it, and its files go
 * when the NodeManager says it ended (stopApplication), so there is no timeout. With the
 * NodeManager's recovery on, registrations survive its restarts. Spark hands an application's
 * secret only to its own shuffle service, so this one learns an application's key from the
 * application's first executor (see ApplicationRegistry). Its metrics go to the NodeManager's
 * metrics2 system ([[YarnServiceMetrics]]) from init to stop; once it listens, a [[ClassPreloader]]
 * loads the classes of its serving path on a daemon thread. Called by the NodeManager's service and
 * event threads; thread-safe.
 */
class SluiceYarnShuffleService extends AuxiliaryService(SluiceYarnShuffleService.Name) with Logging {

  @volatile private var service: ShuffleService = _
  @volatile private var metricsRegistered = false
  @volatile private var preloader: Option[ClassPreloader] = None
  private val started = ConcurrentHashMap.newKeySet[String]() // applications a container of which was started here

  override protected def serviceInit(conf: Configuration): Unit = {
    // Under the NodeManager's isolated class loader (the classpath setting) this is also where
    // Spark's default log4j2 profile comes into effect for the service's own logging.
    logInfo(s"Starting the Sluice shuffle service ($getName)")
    val props = conf.iterator().asScala.map(e => e.getKey -> e.getValue).filter(e => ServiceConfiguration.relevant(e._1)).toMap
    val localDirs = conf.getTrimmedStrings("yarn.nodemanager.local-dirs").toSeq.map(d => localFile(new Path(d)))
    // The NodeManager's recovery path (yarn.nodemanager.recovery.enabled; a qualified file: path) keeps
    // registrations across its restarts.
    val recovery = Option(getRecoveryPath).map(p => new File(localFile(p), "sluice"))
    service = ServiceConfiguration.service(props, bindHost = "0.0.0.0", admit = admit, allowedRoots = localDirs,
      applicationTimeoutMs = Some(0L), recoveryDir = recovery)
    val s = service
    YarnServiceMetrics.register(new YarnServiceMetrics(new ServiceMetrics(() => s.figures)))
    metricsRegistered = true
    super.serviceInit(conf)
  }

  override protected def serviceStart(): Unit = {
    val port = service.start()
    logInfo(s"Sluice shuffle service listening on port $port")
    val p = ClassPreloader.forNodeService()
    p.start()
    preloader = Some(p)
    super.serviceStart()
  }

  override protected def serviceStop(): Unit = {
    try {
      preloader.foreach(_.stop(ClassPreloader.StopTimeoutMs))
      if (metricsRegistered) YarnServiceMetrics.unregister()
      metricsRegistered = false
      if (service != null) service.stop(deleteFiles = false) // the NodeManager deletes applications' dirs
    } finally super.serviceStop()
  }

  /** The thread that loads the serving path's classes once the service listens (tests: that it ran). */
  private[sluice] def classPreloader: Option[ClassPreloader] = preloader

  /** An application may register while a container of it was started here and the application has not ended. */
  private def admit(appId: String): Option[String] =
    if (started.contains(appId)) None else Some("no container of it was started on this NodeManager")

  override def initializeContainer(context: ContainerInitializationContext): Unit = {
    started.add(context.getContainerId.getApplicationAttemptId.getApplicationId.toString)
  }

  override def stopContainer(context: ContainerTerminationContext): Unit = ()

  override def initializeApplication(context: ApplicationInitializationContext): Unit = ()

  override def stopApplication(context: ApplicationTerminationContext): Unit = {
    val app = context.getApplicationId.toString
    started.remove(app)
    if (service != null) service.applicationEnded(app)
  }

  /** The port, as Spark's service reports its own (the NodeManager hands it to containers that ask). */
  override def getMetaData: ByteBuffer = {
    val b = ByteBuffer.allocate(4)
    b.putInt(if (service == null) -1 else service.port)
    b.flip()
    b
  }

  /** The service's metrics, as JSON (tests, the NodeManager's logs). */
  def status: String = if (service == null) "{}" else service.status()

  /** A local path as the NodeManager writes it (`/x`, `file:/x`, `file:///x`) as a file. */
  private def localFile(path: Path): File = new File(path.toUri.getPath)
}

object SluiceYarnShuffleService {

  /** The name yarn-site.xml gives the service (yarn.nodemanager.aux-services). */
  val Name = "sluice_shuffle"
}
