package io.sluice.service

import java.io.{InputStream, OutputStream}
import java.net.{InetAddress, ServerSocket, Socket}
import java.util.concurrent.CopyOnWriteArrayList

import scala.jdk.CollectionConverters._

/**
 * A TCP relay on loopback to `targetPort` whose link can be cut like a pulled cable: after [[cut]]
 * the connections open then stay open but carry nothing more either way (the peers see no close,
 * as across a cut network link), while connections opened later relay normally. An accept thread,
 * and two relay threads per connection; all end with [[close]].
 */
final class TestingCutLink(targetPort: Int) extends AutoCloseable {
  private val server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress)
  private val links = new CopyOnWriteArrayList[Link]()

  def port: Int = server.getLocalPort

  private final class Link(val client: Socket, val target: Socket) {
    @volatile var cut = false
    def close(): Unit = { client.close(); target.close() }
  }

  private val acceptor = new Thread(
    () => {
      try {
        while (!server.isClosed) {
          val client = server.accept()
          val link = new Link(client, new Socket(InetAddress.getLoopbackAddress, targetPort))
          links.add(link)
          relay(link, link.client.getInputStream, link.target.getOutputStream, "to the target")
          relay(link, link.target.getInputStream, link.client.getOutputStream, "to the client")
        }
      } catch { case _: Exception => () } // closed
    }, "cut-link-acceptor")
  acceptor.setDaemon(true)
  acceptor.start()

  private def relay(link: Link, in: InputStream, out: OutputStream, what: String): Unit = {
    val t = new Thread(
      () => {
        val bytes = new Array[Byte](8192)
        try {
          var n = in.read(bytes)
          while (n >= 0) {
            if (!link.cut) { out.write(bytes, 0, n); out.flush() }
            n = in.read(bytes)
          }
          if (!link.cut) link.close()
        } catch { case _: Exception => if (!link.cut) link.close() }
      }, s"cut-link-relay $what")
    t.setDaemon(true)
    t.start()
  }

  /** Cuts the link of every connection open now: what either end sends from now on is lost. */
  def cut(): Unit = links.asScala.foreach(_.cut = true)

  /** Connections relayed so far (cut or not). */
  def connections: Int = links.size

  override def close(): Unit = {
    server.close()
    links.asScala.foreach(_.close())
    acceptor.join(10000)
  }
}
