package io.sluice.netty

import java.io.{File, IOException}
import java.nio.file.Files

import scala.jdk.CollectionConverters._

/**
 * What the kernel says about this JVM's TCP sockets (Linux). Only sockets of this process count:
 * /proc/net/tcp lists the whole machine, where another test run may take a port number that was
 * ours a moment ago, as a client's ephemeral port or a server's (seen under dev/stress and in CI).
 */
object TestingTcp {

  private val Established = "01"
  private val Listen = "0A"

  /**
   * The established TCP connections this JVM holds to `port` (their client ends, as /proc/net/tcp
   * lines), or None without /proc.
   */
  def establishedTo(port: Int): Option[Seq[String]] = ourSockets(Established, remotePort = Some(port), localPort = None)

  /** The listening sockets this JVM holds on `port` (as /proc/net/tcp lines), or None without /proc. */
  def listeningOn(port: Int): Option[Seq[String]] = ourSockets(Listen, remotePort = None, localPort = Some(port))

  /** Asserts that this JVM holds exactly one connection to `port` (where /proc says). */
  def assertOneConnectionTo(port: Int): Unit = establishedTo(port).foreach { lines =>
    assert(lines.size == 1, s"/proc/net/tcp shows ${lines.size} connections of this JVM to $port:\n${lines.mkString("\n")}")
  }

  private def ourSockets(state: String, remotePort: Option[Int], localPort: Option[Int]): Option[Seq[String]] = {
    val files = Seq(new File("/proc/net/tcp"), new File("/proc/net/tcp6")).filter(_.canRead)
    val fds = new File("/proc/self/fd")
    if (files.isEmpty || !fds.canRead) None
    else {
      val ours = Option(fds.listFiles()).toSeq.flatten.flatMap { fd =>
        try {
          val target = Files.readSymbolicLink(fd.toPath).toString
          if (target.startsWith("socket:[")) Some(target.stripPrefix("socket:[").stripSuffix("]")) else None
        } catch { case _: IOException => None } // closed meanwhile
      }.toSet
      def portOf(address: String) = Integer.parseInt(address.split(":")(1), 16)
      Some(files.flatMap { f =>
        Files.readAllLines(f.toPath).asScala.drop(1).filter { l =>
          // sl, local address, remote address, state, queues, timer, retransmits, uid, timeout, inode
          val cols = l.trim.split("\\s+")
          cols.length > 9 && cols(3) == state && ours(cols(9)) &&
          localPort.forall(_ == portOf(cols(1))) && remotePort.forall(_ == portOf(cols(2)))
        }
      })
    }
  }
}
