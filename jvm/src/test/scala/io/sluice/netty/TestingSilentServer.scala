package io.sluice.netty

import java.io.DataInputStream
import java.net.{InetAddress, ServerSocket, Socket}
import java.nio.ByteBuffer
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.atomic.AtomicInteger

import scala.jdk.CollectionConverters._

/**
 * A Sluice server that hangs like a stopped executor (SIGSTOP, a pulled cable): it accepts TCP
 * connections, answers Spark's upgrade RPC by hand (no authentication), and from then on neither
 * reads nor answers anything, while keeping every socket open until [[close]]. Its accept thread
 * is the only thread; it ends with [[close]].
 */
final class TestingSilentServer extends AutoCloseable {
  private val server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress)
  private val sockets = new CopyOnWriteArrayList[Socket]()

  /** Connections upgraded to Sluice (then left silent). */
  val upgraded = new AtomicInteger

  def port: Int = server.getLocalPort

  private val acceptor = new Thread(
    () => {
      try {
        while (!server.isClosed) {
          val s = server.accept()
          sockets.add(s)
          try { upgrade(s); upgraded.incrementAndGet() }
          catch { case _: Exception => s.close() }
        }
      } catch { case _: Exception => () } // closed
    }, "silent-sluice-server")
  acceptor.setDaemon(true)
  acceptor.start()

  /** Reads Spark's RpcRequest frame carrying the Sluice upgrade and sends its RpcResponse. */
  private def upgrade(s: Socket): Unit = {
    s.setSoTimeout(30000)
    val in = new DataInputStream(s.getInputStream)
    val frameLength = in.readLong()
    val rest = new Array[Byte]((frameLength - 8).toInt)
    in.readFully(rest)
    val request = ByteBuffer.wrap(rest)
    assert(request.get() == 3, "an RpcRequest") // Spark's message type
    val requestId = request.getLong()
    val body = new Array[Byte](request.getInt())
    request.get(body)
    assert(NettyProtocol.upgradeApplication(ByteBuffer.wrap(body)).exists(_.isRight), "not a Sluice upgrade request")
    val reply = NettyProtocol.UpgradeReply
    val response = ByteBuffer.allocate(8 + 1 + 8 + 4 + reply.length)
    response.putLong(response.capacity()).put(4.toByte /* RpcResponse */ ).putLong(requestId).putInt(reply.length).put(reply)
    s.getOutputStream.write(response.array())
    s.getOutputStream.flush()
  }

  /** Connections the server holds open (the client's close shows up only once written to). */
  def numOpen: Int = sockets.asScala.count(s => !s.isClosed)

  override def close(): Unit = {
    server.close()
    sockets.forEach(s => s.close())
    acceptor.join(10000)
  }
}
