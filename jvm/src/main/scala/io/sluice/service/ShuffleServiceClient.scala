package io.sluice.service

import java.io.IOException
import java.util.concurrent.TimeUnit

import scala.util.control.NonFatal

import io.sluice.config.ServiceOptions
import io.sluice.netty.RemoteErrors
import io.sluice.service.ServiceMessages._
import org.apache.spark.network.TransportContext
import org.apache.spark.network.client.{TransportClient, TransportClientBootstrap, TransportClientFactory}
import org.apache.spark.network.crypto.AuthClientBootstrap
import org.apache.spark.network.sasl.SecretKeyHolder
import org.apache.spark.network.server.NoOpRpcHandler
import org.apache.spark.network.util.TransportConf

/**
 * How an application speaks to node shuffle services ([[ServiceMessages]]; Spark's
 * `ExternalBlockStoreClient` plays this part for its own service): an executor registers its
 * application and its dirs with its node's service, the driver says the application is alive,
 * drops shuffles and ends. With spark.authenticate (`secret`), the application's key
 * ([[ApplicationKey]]) is registered on a connection of its own, and every other message travels
 * on a connection authenticated with it. Each call waits at most `timeoutMs`. Thread-safe.
 */
final class ShuffleServiceClient(
    transportConf: TransportConf,
    val appId: String,
    secret: Option[SecretKeyHolder],
    timeoutMs: Long) extends java.io.Closeable {

  private val context = new TransportContext(transportConf, new NoOpRpcHandler, false, true)
  private val plain: TransportClientFactory = context.createClientFactory(java.util.List.of[TransportClientBootstrap]())
  private val authenticated: TransportClientFactory = secret.fold(plain) { k =>
    context.createClientFactory(java.util.List.of[TransportClientBootstrap](
        new AuthClientBootstrap(transportConf, appId, ApplicationKey.holder(k))))
  }

  /**
   * Registers the application (its key with spark.authenticate) and then executor `executorId`'s
   * `dirs` with the service at host:port; returns how long the service lets the application stay
   * silent (ms, 0: forever). An IOException naming the service and what it said on any failure.
   */
  def registerExecutor(host: String, port: Int, executorId: String, dirs: Seq[String]): Long = {
    val (timeoutMs, failed) = registerExecutors(host, port, Seq(executorId -> dirs))
    failed.headOption.foreach { case (_, e) => throw e }
    timeoutMs
  }

  /**
   * Registers the application once and then each of `executors`' dirs (an executor id and its dirs)
   * with the service at host:port: how long the service lets the application stay silent (ms, 0:
   * forever, as its last executor registration said) and the executors it did not register, each
   * with an IOException naming the service and what it said. The application's refusal is thrown.
   * Without spark.authenticate everything goes on one connection (an executor registers as it
   * starts); with it, the executors go on a connection authenticated with the key just registered.
   */
  def registerExecutors(host: String, port: Int, executors: Seq[(String, Seq[String])]): (Long, Seq[(String, IOException)]) = {
    val key = secret.map(k => ApplicationKey.derive(k.getSecretKey(appId)))
    val once = plain.createUnmanagedClient(host, port)
    var timeoutMs = 0L
    val failed = Seq.newBuilder[(String, IOException)]
    try {
      try ask(once, host, port, RegisterApplication(appId, key))
      catch {
        case e: IOException =>
          throw new IOException(s"The Sluice shuffle service at $host:$port (${ServiceOptions.ServicePort.key}) " +
              s"refused application $appId: ${e.getMessage}", e)
      }
      for ((executorId, dirs) <- executors) {
        val executor = RegisterExecutor(appId, executorId, dirs)
        try {
          val reply =
            if (secret.isDefined) send(host, port, executor)
            else {
              try ask(once, host, port, executor)
              catch { case e: IOException => throw failure(host, port, s"failed RegisterExecutor of application $appId", e) }
            }
          timeoutMs = reply.toLongOption.getOrElse(0L)
        } catch { case e: IOException => failed += executorId -> e }
      }
    } finally once.close()
    (timeoutMs, failed.result())
  }

  /**
   * Tells the service the application is alive; how long it may stay silent (ms, 0: forever), or
   * None when the service holds no registration of it (it restarted without a recovery dir): it
   * says so, or, with spark.authenticate, it refuses the application's authentication (it knows no
   * key for it, or another one, which registering again then names).
   */
  def alive(host: String, port: Int): Option[Long] =
    try {
      send(host, port, ApplicationAlive(appId)) match {
        case ServiceMessages.NotRegistered => None
        case timeout => Some(timeout.toLongOption.getOrElse(0L))
      }
    } catch { case _: ShuffleServiceClient.AuthenticationRefused => None }

  /** Deletes shuffle `shuffleId`'s files on that node; how many went. */
  def removeShuffle(host: String, port: Int, shuffleId: Int): Int =
    send(host, port, RemoveShuffle(appId, shuffleId)).toIntOption.getOrElse(0)

  /** Deletes everything the service holds of the application. */
  def removeApplication(host: String, port: Int): Unit = send(host, port, RemoveApplication(appId))

  /** The service's metrics as JSON, with the application's own entry. */
  def status(host: String, port: Int): String = send(host, port, Status(appId))

  private def send(host: String, port: Int, m: Message): String = {
    val client =
      try authenticated.createClient(host, port)
      catch {
        // Spark's client factory throws IOExceptions for the connection, and propagates a failed
        // authentication (its bootstrap) as whatever the handshake threw.
        case e: Exception if secret.isDefined && !e.isInstanceOf[IOException] =>
          throw new ShuffleServiceClient.AuthenticationRefused(
            failure(host, port, s"refused the authentication of application $appId", e))
        case e: Exception => throw failure(host, port, s"could not be reached by application $appId", e)
      }
    try ask(client, host, port, m)
    catch {
      case e: IOException =>
        // A request that timed out or broke leaves the pooled connection suspect (after a cut link it
        // may look open while the service has long dropped it): the next call opens a new one.
        client.close()
        throw failure(host, port, s"failed ${m.getClass.getSimpleName} of application $appId", e)
    }
  }

  private def ask(client: TransportClient, host: String, port: Int, m: Message): String =
    try ServiceMessages.decodeReply(client.sendRpcSync(ServiceMessages.encode(m), timeoutMs)).text
    catch {
      case e: IOException => throw e
      case e: Exception => throw new IOException(RemoteErrors.message(Option(e.getCause).getOrElse(e)), e)
    }

  private def failure(host: String, port: Int, what: String, cause: Throwable): IOException =
    new IOException(s"The Sluice shuffle service at $host:$port (${ServiceOptions.ServicePort.key}) $what: " +
        cause.getMessage, cause)

  override def close(): Unit = {
    if (authenticated ne plain) authenticated.close()
    plain.close()
    context.close()
  }
}

object ShuffleServiceClient {

  /** A service that was reached but refused the application's authentication (spark.authenticate). */
  final class AuthenticationRefused(cause: IOException) extends IOException(cause.getMessage, cause.getCause)

  /** How often a driver says its application is alive: every 30 s, or a third of the service's timeout. */
  def aliveIntervalMs(serviceTimeoutMs: Long): Long =
    if (serviceTimeoutMs <= 0) TimeUnit.SECONDS.toMillis(30) else math.max(1000L, math.min(30000L, serviceTimeoutMs / 3))

  /**
   * `message` (one call to a service), tried up to `maxAttempts` times: after each failure but the
   * last, `onRetry(attempt, failure)` and a wait of `waitMs(attempt)`. The last failure is thrown.
   */
  def attempting[T](maxAttempts: Int, waitMs: Int => Long)(onRetry: (Int, Throwable) => Unit)(message: => T): T = {
    var attempt = 1
    var result: Option[T] = None
    while (result.isEmpty) {
      try result = Some(message)
      catch {
        case NonFatal(e) if attempt < maxAttempts =>
          onRetry(attempt, e)
          Thread.sleep(waitMs(attempt))
          attempt += 1
      }
    }
    result.get
  }
}
