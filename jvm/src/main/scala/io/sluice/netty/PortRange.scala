package io.sluice.netty

import java.io.IOException
import java.net.BindException

import scala.annotation.tailrec

import io.sluice.config.SluiceOptions

/**
 * The ports the executor's Sluice server tries, in order: spark.sluice.network.port, then each
 * next port up to spark.port.maxRetries more (wrapping above 65535 to 1024), as Spark's own
 * services retry theirs (Utils.startServiceOnPort) and Flink's NettyServer walks the range of
 * taskmanager.data.bind-port. So several executors of one application on one host (YARN's
 * NodeManager runs several) share one known base. Base 0 is one attempt at an ephemeral port.
 * Stateless; [[bind]] runs on the thread that starts the server.
 *
 * @param base       spark.sluice.network.port
 * @param maxRetries spark.port.maxRetries (Spark's default 16)
 */
final case class PortRange(base: Int, maxRetries: Int) {

  require(base >= 0 && base <= 65535, s"${SluiceOptions.Port.key} must be 0..65535, not $base")
  require(maxRetries >= 0, s"${PortRange.MaxRetriesKey} must be at least 0, not $maxRetries")

  /** The ports in the order they are tried. */
  def ports: Seq[Int] =
    if (base == 0) Seq(0) else (0 to maxRetries).map(offset => ((base + offset - 1024) % (65536 - 1024)) + 1024)

  /**
   * Runs `start` on each port in turn until one is not already in use, and returns its result.
   * Any failure other than a port in use is thrown at once; when every port is in use, a
   * BindException names the two settings to change.
   */
  def bind[T](host: String)(start: Int => T): T = {
    @tailrec def attempt(remaining: List[Int], last: Throwable): T = remaining match {
      case Nil =>
        val e = new BindException(s"Sluice's server could not bind $host: every port of $describe is in use. " +
          s"Set ${SluiceOptions.Port.key} to another base (0 picks a free port) or raise ${PortRange.MaxRetriesKey}.")
        e.initCause(last)
        throw e
      case port :: rest =>
        val outcome =
          try Right(start(port))
          catch { case e: Throwable if port != 0 && PortRange.inUse(e) => Left(e) }
        outcome match {
          case Right(result) => result
          case Left(e) => attempt(rest, e)
        }
    }
    attempt(ports.toList, null)
  }

  /** The settings and the ports they give, for messages. */
  def describe: String =
    if (base == 0) s"${SluiceOptions.Port.key}=0"
    else s"${SluiceOptions.Port.key}=$base and ${PortRange.MaxRetriesKey}=$maxRetries (ports ${ports.mkString(", ")})"
}

object PortRange {

  /** Spark's key for how many ports above the configured one a service tries. */
  val MaxRetriesKey = "spark.port.maxRetries"

  /** Spark's default for [[MaxRetriesKey]] outside its own tests. */
  val DefaultMaxRetries = 16

  /** Whether `e` (or a cause) says the port is taken: the JDK's BindException, or Netty's native transport's. */
  @tailrec def inUse(e: Throwable): Boolean = e match {
    case null => false
    case _: BindException => true
    case io: IOException if Option(io.getMessage).exists(_.contains("Address already in use")) => true
    case other => inUse(other.getCause)
  }
}
