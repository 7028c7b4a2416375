package io.sluice.netty

import java.nio.ByteBuffer

import io.sluice.partition.ResultPartitionManager
import org.apache.spark.network.client.{RpcResponseCallback, TransportClient}

/**
 * What a Sluice server serves, by application: every connection names its application in the
 * upgrade to the Sluice protocol, and reads only that application's partitions (no counterpart
 * in Flink, whose TaskManagers serve one cluster; Spark's external shuffle service checks a
 * request's application the same way). An executor's server serves its own application
 * ([[ServedApplications.only]]); a node shuffle service every application registered with it.
 * Called on the connections' event loops; implementations are thread-safe.
 */
trait ServedApplications {

  /**
   * The partitions a connection of application `appId` reads, or why it may not (sent to the
   * client, who fails its readers with it). `authenticated` is the application Spark's
   * authentication proved the client belongs to (spark.authenticate), if any.
   */
  def connect(appId: String, authenticated: Option[String]): Either[String, PartitionSource]

  /**
   * Answers a control message other than the upgrade, after authentication (a node service's
   * registrations); false when `message` is none of its own.
   */
  def receiveControl(client: TransportClient, message: ByteBuffer, callback: RpcResponseCallback): Boolean = false

  /**
   * Answers a control message that may come before authentication (a node service learning an
   * application's key); false when `message` is none of its own, and it goes on to Spark's
   * authentication.
   */
  def receiveBeforeAuthentication(client: TransportClient, message: ByteBuffer, callback: RpcResponseCallback): Boolean =
    false
}

/** The partitions one connection reads: those of one application. */
trait PartitionSource {
  def partitions: ResultPartitionManager

  /**
   * Makes the finished partitions among `inputs`, written by executor `producerExecutor`, readable
   * before the request opens them: a node service finds them on disk. An executor's server
   * serves only its own partitions and is sent no executor. A PartitionNotFoundException names the
   * first input that is not there.
   */
  def prepare(producerExecutor: Option[String], inputs: IndexedSeq[RequestedSubpartitions]): Unit
}

object ServedApplications {

  /** An executor's server: application `appId`'s partitions in `partitions`, and nobody else's. */
  def only(appId: String, partitions: ResultPartitionManager): ServedApplications = new ServedApplications {
    private val source = new PartitionSource {
      override val partitions: ResultPartitionManager = partitionsOf
      override def prepare(producerExecutor: Option[String], inputs: IndexedSeq[RequestedSubpartitions]): Unit =
        producerExecutor.foreach { e =>
          throw new TransportProtocolException(s"a request for executor $e's map outputs reached an executor's " +
            "server, which serves only its own (a node shuffle service's port was expected)")
        }
    }
    private def partitionsOf = partitions

    override def connect(app: String, authenticated: Option[String]): Either[String, PartitionSource] =
      if (app == appId && authenticated.forall(_ == appId)) Right(source)
      else Left(refusal(app, authenticated, s"this executor's Sluice server serves application $appId only"))
  }

  /** Why a connection claiming `app` (authenticated as `authenticated`) is refused. */
  def refusal(app: String, authenticated: Option[String], why: String): String =
    authenticated.filter(_ != app) match {
      case Some(a) => s"a client authenticated as application $a asked for application $app's shuffle partitions; $why"
      case None => s"a reader of application $app asked for its shuffle partitions, but $why (the executor that " +
        "served them on this port is gone and another application's server took the port)"
    }
}
