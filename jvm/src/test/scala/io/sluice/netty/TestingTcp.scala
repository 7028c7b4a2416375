package io.sluice.netty

import java.io.{File, IOException}
import java.nio.file.Files

import scala.jdk.CollectionConverters._

/** What the kernel says about TCP connections (Linux). */
object TestingTcp {

  /**
   * The established TCP connections this JVM holds to `port` (their client ends, as /proc/net/tcp
   * lines), or None without /proc. Only sockets of this process count: /proc/net/tcp lists the
   * whole machine, where another test run may connect to a port number it saw free a moment ago
   * and that is now one of ours (seen under dev/stress with other JVM suites running alongside).
   */
  def establishedTo(port: Int): Option[Seq[String]] = {
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
      Some(files.flatMap { f =>
        Files.readAllLines(f.toPath).asScala.drop(1).filter { l =>
          // sl, local address, remote address, state, queues, timer, retransmits, uid, timeout, inode
          val cols = l.trim.split("\\s+")
          cols.length > 9 && cols(3) == "01" && Integer.parseInt(cols(2).split(":")(1), 16) == port && ours(cols(9))
        }
      })
    }
  }

  /** Asserts that this JVM holds exactly one connection to `port` (where /proc says). */
  def assertOneConnectionTo(port: Int): Unit = establishedTo(port).foreach { lines =>
    assert(lines.size == 1, s"/proc/net/tcp shows ${lines.size} connections of this JVM to $port:\n${lines.mkString("\n")}")
  }
}
