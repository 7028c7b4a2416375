package io.sluice.service

import java.io.File
import java.nio.ByteBuffer
import java.nio.file.{Files, LinkOption}
import java.util.concurrent.{ConcurrentHashMap, ExecutorService}

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.sluice.netty.{PartitionSource, ServedApplications}
import io.sluice.partition.ResultPartitionManager
import io.sluice.service.ServiceMessages._
import org.apache.spark.network.client.{RpcResponseCallback, TransportClient}
import org.apache.spark.network.sasl.SecretKeyHolder

/**
 * The applications a node shuffle service serves (the role of the registrations in Spark's
 * `ExternalShuffleBlockResolver` and its `ShuffleSecretManager`): it answers the control messages
 * ([[ServiceMessages]]), binds every connection to the one application it names, gives Spark's
 * authentication each application's key, and removes applications (a shuffle's files when Spark
 * drops it, everything when it ends or stays silent past the timeout).
 *
 * Keys are learned from an application's first registration: the service has no other channel
 * to an application (Spark hands an application's secret to its own YARN shuffle service only),
 * so a later registration must carry the same key, and an application nobody registered serves no
 * reader. Registered dirs must be absolute, existing, not symbolic links, named `sluice-*`, and
 * under `settings.allowedRoots` when given; a partition's path is only ever derived from them.
 *
 * Called on the server's event loops; anything that touches the disk runs on `housekeeping` and
 * answers from there. Thread-safe.
 *
 * @param log    where registrations are kept across restarts of the service, if anywhere
 * @param totals what the service's transport did and holds now (for `Status`)
 * @param admit  whether the host platform lets `appId` register (YARN: a container of it runs on
 *               this node); Some(why) refuses
 */
final class ApplicationRegistry(
    settings: ServiceSettings,
    caches: ResultPartitionManager.Caches,
    housekeeping: ExecutorService,
    log: Option[RegistrationLog],
    totals: () => ServiceTotals,
    admit: String => Option[String] = _ => None) extends ServedApplications with SecretKeyHolder {

  private val apps = new ConcurrentHashMap[String, ServedApplication]()

  // ---- Spark's authentication -------------------------------------------------------------

  override def getSaslUser(appId: String): String = ApplicationRegistry.SaslUser

  override def getSecretKey(appId: String): String = {
    val app = apps.get(appId)
    if (app == null) null else app.key.orNull
  }

  // ---- connections ------------------------------------------------------------------------

  override def connect(appId: String, authenticated: Option[String]): Either[String, PartitionSource] = {
    val app = apps.get(appId)
    if (app == null) {
      Left(ServedApplications.refusal(appId, authenticated,
          "no executor of that application registered with this " +
            "node shuffle service"))
    } else if (settings.authenticate && !authenticated.contains(appId)) {
      Left(ServedApplications.refusal(appId, authenticated,
          s"this node shuffle service serves application $appId " +
            "to its own authenticated readers only"))
    } else {
      app.touch()
      Right(app.source)
    }
  }

  override def receiveBeforeAuthentication(client: TransportClient, message: ByteBuffer,
      callback: RpcResponseCallback): Boolean =
    ServiceMessages.isServiceMessage(message) && (decodeOrFail(message, callback) match {
      case Some(r: RegisterApplication) => answer(callback)(registerApplication(r)); true
      case Some(_) => false // the rest after authentication (Spark's handler refuses them before)
      case None => true
    })

  override def receiveControl(client: TransportClient, message: ByteBuffer, callback: RpcResponseCallback): Boolean =
    ServiceMessages.isServiceMessage(message) && {
      decodeOrFail(message, callback).foreach { m =>
        val claimed = Option(client.getClientId)
        if (settings.authenticate && !claimed.contains(m.appId) && !m.isInstanceOf[Status]) {
          callback.onFailure(new SecurityException(s"a client authenticated as ${claimed.getOrElse("nobody")} sent a " +
              s"message for application ${m.appId}"))
        } else dispatch(m, claimed, callback)
      }
      true
    }

  private def decodeOrFail(message: ByteBuffer, callback: RpcResponseCallback): Option[Message] =
    try Some(ServiceMessages.decode(message))
    catch {
      case NonFatal(e) =>
        callback.onFailure(new IllegalArgumentException(s"Unreadable node service message: ${e.getMessage}")); None
    }

  private def dispatch(m: Message, authenticated: Option[String], callback: RpcResponseCallback): Unit = m match {
    case r: RegisterApplication => answer(callback)(registerApplication(r))
    case r: RegisterExecutor => answer(callback)(registerExecutor(r))
    case ApplicationAlive(app) =>
      answer(callback)(Right(Option(apps.get(app)).fold(ServiceMessages.NotRegistered) { a =>
        a.touch(); settings.applicationTimeoutMs.toString
      }))
    case RemoveShuffle(app, shuffle) =>
      later(callback)(Option(apps.get(app)).fold(0)(_.removeShuffle(shuffle)).toString)
    case RemoveApplication(app) => later(callback) { removeApplication(app, "its driver said it ended"); "" }
    case Status(app) =>
      // An application sees its own entry only (authenticated as it, when the service authenticates); the totals are the node's.
      val own = Some(app).filter(a => a.nonEmpty && (!settings.authenticate || authenticated.contains(a)))
      later(callback)(ServiceStatus.json(this, totals(), own))
  }

  private def answer(callback: RpcResponseCallback)(result: Either[String, String]): Unit = result match {
    case Right(text) => callback.onSuccess(ServiceMessages.encodeReply(Reply(text)))
    case Left(why) => callback.onFailure(new IllegalArgumentException(why))
  }

  /** Runs `work` on the housekeeping thread (it touches the disk) and answers from there. */
  private def later(callback: RpcResponseCallback)(work: => String): Unit =
    try housekeeping.execute { () =>
        try callback.onSuccess(ServiceMessages.encodeReply(Reply(work)))
        catch { case NonFatal(e) => callback.onFailure(e) }
      }
    catch { case NonFatal(e) => callback.onFailure(new IllegalStateException("The node shuffle service is stopping", e)) }

  // ---- registrations ----------------------------------------------------------------------

  private def registerApplication(r: RegisterApplication): Either[String, String] =
    if (!RegistrationLog.writable(r.appId)) Left(s"an application id with a tab, line break or NUL: '${r.appId}'")
    else if (settings.authenticate && r.key.isEmpty) {
      Left(s"this node shuffle service authenticates every application (its spark.authenticate is true), and " +
        s"application ${r.appId} runs without spark.authenticate: turn it on for the application")
    } else if (!settings.authenticate && r.key.isDefined) {
      Left(s"application ${r.appId} runs with spark.authenticate, and this node shuffle service does not " +
        "authenticate (its spark.authenticate is false), so it would serve the application's map outputs to anyone: " +
        "set spark.authenticate=true in the service's settings")
    } else {
      admit(r.appId) match {
        case Some(why) => Left(s"application ${r.appId} cannot register: $why")
        case None =>
          var added = false
          val app = apps.computeIfAbsent(r.appId,
            { id =>
              added = true
              new ServedApplication(id, r.key, caches, settings.maxOpenFiles)
            })
          if (added) log.foreach(_.record(RegistrationLog.Application(r.appId, r.key)))
          if (app.key != r.key) Left(s"application ${r.appId} is registered with this node shuffle service under another key")
          else { app.touch(); Right(settings.applicationTimeoutMs.toString) }
      }
    }

  private def registerExecutor(r: RegisterExecutor): Either[String, String] = {
    val app = apps.get(r.appId)
    if (app == null) Left(s"application ${r.appId} is not registered")
    else if (!RegistrationLog.writable(r.executorId) || !r.dirs.forall(RegistrationLog.writable)) {
      Left(s"executor ${r.executorId} of application ${r.appId}: an id or dir with a tab, line break or NUL")
    } else {
      val dirs = r.dirs.map(new File(_))
      dirs.iterator.map(checkDir).collectFirst { case Some(why) => why } match {
        case Some(why) => Left(s"executor ${r.executorId} of application ${r.appId}: $why")
        case None =>
          app.touch()
          app.layout.register(r.executorId, dirs.toIndexedSeq).map { _ =>
            log.foreach(_.record(RegistrationLog.Executor(r.appId, r.executorId, r.dirs)))
            ApplicationRegistry.log.info(s"Executor ${r.executorId} of application ${r.appId} registered " +
              s"${dirs.mkString(", ")}")
            settings.applicationTimeoutMs.toString
          }
      }
    }
  }

  /** Why `dir` cannot be registered, or None. */
  private def checkDir(dir: File): Option[String] = {
    val path = dir.toPath
    if (!dir.isAbsolute || path.normalize() != path) Some(s"$dir is not an absolute, normalised path")
    else if (!dir.getName.startsWith(ApplicationRegistry.DirPrefix)) Some(s"$dir is not one of Sluice's dirs (sluice-*)")
    else if (!Files.isDirectory(path, LinkOption.NOFOLLOW_LINKS)) Some(s"$dir is not a directory (or is a symbolic link)")
    else if (path.toRealPath() != path) Some(s"$dir lies under a symbolic link (${path.toRealPath()})")
    else if (settings.allowedRoots.nonEmpty && !settings.allowedRoots.exists(r => path.startsWith(r.toPath))) {
      Some(s"$dir is outside the dirs this service may read (${settings.allowedRoots.mkString(", ")})")
    } else None
  }

  // ---- removal ----------------------------------------------------------------------------

  /** Removes application `appId` and its files (housekeeping thread, or the platform's); `why` goes to the log. */
  def removeApplication(appId: String, why: String): Unit = {
    val app = apps.remove(appId)
    if (app != null) {
      ApplicationRegistry.log.info(s"Removing application $appId ($why): its map outputs on this node are deleted")
      log.foreach(_.record(RegistrationLog.Removed(appId)))
      app.remove()
    }
  }

  /**
   * Registers again what `log` kept from before a restart (service start, before the port opens):
   * every application with its key, and every executor whose dirs are still there; each gets a
   * whole timeout to be heard of again.
   */
  def recover(): Int = log.fold(0) { l =>
    var executors = 0
    l.replay().foreach {
      case RegistrationLog.Application(app, key) =>
        apps.computeIfAbsent(app, id => new ServedApplication(id, key, caches, settings.maxOpenFiles))
      case RegistrationLog.Executor(app, executor, dirs) =>
        val files = dirs.map(new File(_))
        Option(apps.get(app)).filter(_ => files.forall(f => checkDir(f).isEmpty)).foreach { a =>
          if (a.layout.register(executor, files.toIndexedSeq).isRight) executors += 1
        }
      case RegistrationLog.Removed(_) => ()
    }
    if (apps.size > 0) {
      ApplicationRegistry.log.info(s"Recovered ${apps.size} applications and $executors executors' dirs from ${l}")
    }
    executors
  }

  /** Removes every application silent for longer than the timeout (housekeeping thread). */
  def expireSilent(nowNanos: Long): Unit =
    if (settings.applicationTimeoutMs > 0) {
      val limit = settings.applicationTimeoutMs * 1000000L
      apps.values().asScala.toList.filter(a => nowNanos - a.lastHeard > limit).foreach { a =>
        removeApplication(a.appId, s"nothing heard of it for ${settings.applicationTimeoutMs}ms")
      }
    }

  /** The applications registered now. */
  def applications: Seq[ServedApplication] = apps.values().asScala.toSeq

  def application(appId: String): Option[ServedApplication] = Option(apps.get(appId))

  /**
   * Forgets every application (the service stops): with `deleteFiles` their files go and the
   * recovery log says so; without, they stay for a restarted service (which recovers them) or the
   * platform.
   */
  def clear(deleteFiles: Boolean): Unit = {
    apps.keySet().asScala.toList.foreach { id =>
      val app = apps.remove(id)
      if (app != null) {
        if (deleteFiles) { log.foreach(_.record(RegistrationLog.Removed(id))); app.remove() }
        else app.partitions.shutdown(keepFinishedFiles = true)
      }
    }
    log.foreach(_.close())
  }
}

object ApplicationRegistry {
  private val log = org.slf4j.LoggerFactory.getLogger(classOf[ApplicationRegistry])

  /** The SASL user Spark's SecurityManager names for every application. */
  val SaslUser = "sparkSaslUser"

  /** How an executor's Sluice dirs, which it registers with its node's service, begin their names. */
  val DirPrefix = "sluice-"
}

/**
 * A node shuffle service's own settings.
 *
 * @param authenticate         spark.authenticate: every application's readers authenticate with its key
 * @param applicationTimeoutMs an application nothing is heard of for this long is removed; 0: never
 *                             (YARN removes applications itself)
 * @param allowedRoots         registered dirs must lie under one of these; empty: anywhere
 * @param recoveryDir          where registrations are kept across restarts ([[RegistrationLog]]), if anywhere
 */
final case class ServiceSettings(
    authenticate: Boolean,
    applicationTimeoutMs: Long,
    allowedRoots: Seq[File],
    maxOpenFiles: Int,
    indexCacheBytes: Long,
    recoveryDir: Option[File] = None)
