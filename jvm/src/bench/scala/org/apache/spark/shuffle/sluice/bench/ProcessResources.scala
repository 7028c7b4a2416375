package org.apache.spark.shuffle.sluice.bench

import java.io.{File, IOException}
import java.lang.management.ManagementFactory
import java.nio.file.Files

import scala.jdk.CollectionConverters._

/**
 * This JVM's file descriptors and TCP sockets, read from Linux's /proc, and its heap after a
 * collection: what a [[SimulatedCluster]] attributes to each of its executors. Stateless.
 */
object ProcessResources {

  def isSupported: Boolean = new File("/proc/self/fd").isDirectory && new File("/proc/self/net/tcp").isFile

  /** The target of every open descriptor (a path, `socket:[inode]`, `anon_inode:[eventpoll]`, `pipe:[...]`). */
  def descriptors(): Seq[String] =
    Option(new File("/proc/self/fd").listFiles()).getOrElse(Array.empty[File]).toSeq.flatMap { fd =>
      try Some(Files.readSymbolicLink(fd.toPath).toString)
      catch { case _: IOException => None } // closed while listing
    }

  /** A descriptor's socket inode, if it is a socket. */
  def socketInode(target: String): Option[Long] =
    if (target.startsWith("socket:[") && target.endsWith("]")) target.substring(8, target.length - 1).toLongOption
    else None

  /** One TCP socket of this network namespace: its local and remote port and its state (0A: listening). */
  final case class TcpSocket(localPort: Int, remotePort: Int, listening: Boolean)

  /** The TCP sockets (IPv4 and IPv6) of this JVM's network namespace, by inode. */
  def tcpSockets(): Map[Long, TcpSocket] =
    Seq("/proc/self/net/tcp", "/proc/self/net/tcp6").flatMap { table =>
      val f = new File(table)
      if (!f.isFile) Nil
      else Files.readAllLines(f.toPath).asScala.drop(1).flatMap { line =>
        val cols = line.trim.split("\\s+")
        if (cols.length < 10) None
        else {
          def port(address: String): Int = Integer.parseInt(address.substring(address.lastIndexOf(':') + 1), 16)
          cols(9).toLongOption.filter(_ != 0L).map(_ -> TcpSocket(port(cols(1)), port(cols(2)), cols(3) == "0A"))
        }
      }
    }.toMap

  /** Bytes of heap in use after a full collection (as close to what is retained as the JVM tells). */
  def retainedHeapBytes(): Long = {
    val memory = ManagementFactory.getMemoryMXBean
    var last = Long.MaxValue
    var i = 0
    while (i < 3) { // collect until the figure stops falling (finalizers, references cleared late)
      System.gc()
      val used = memory.getHeapMemoryUsage.getUsed
      if (used >= last) i = 3 else { last = used; i += 1 }
    }
    math.min(last, memory.getHeapMemoryUsage.getUsed)
  }
}
