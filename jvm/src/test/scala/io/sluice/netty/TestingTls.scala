package io.sluice.netty

import java.io.{ByteArrayOutputStream, File, InputStream, OutputStream}
import java.net.{InetAddress, InetSocketAddress, ServerSocket, Socket, SocketException}
import java.nio.file.Files
import java.util.concurrent.{ConcurrentLinkedQueue, TimeUnit}

import scala.jdk.CollectionConverters._

/**
 * A self-signed key pair for TLS tests, made once per JVM with one run of the JDK's keytool: a
 * PKCS12 key store with an EC private key and its certificate (CN=localhost, SAN 127.0.0.1), which
 * also serves as the trust store (the JDK trusts the certificate of a key entry). [[settings]] are
 * Spark's spark.ssl.rpc.* keys for it (JDK provider, as Spark's default).
 */
object TestingTls {
  val Password = "sluice-test-pw"

  lazy val keyStore: File = {
    val dir = Files.createTempDirectory("sluice-tls").toFile
    dir.deleteOnExit()
    val keys = new File(dir, "keystore.p12")
    keytool("-J-XX:TieredStopAtLevel=1", "-genkeypair", "-alias", "sluice", "-keyalg", "EC", "-groupname", "secp256r1",
      "-validity", "2",
      "-dname", "CN=localhost", "-ext", "SAN=ip:127.0.0.1,dns:localhost", "-keystore", keys.getPath,
      "-storetype", "PKCS12", "-storepass", Password, "-keypass", Password)
    keys.deleteOnExit()
    keys
  }

  def trustStore: File = keyStore

  /** Spark's TLS settings for RPC and block transfer (what SSLOptions gives a TransportConf). */
  def settings: Map[String, String] = Map(
    "spark.ssl.rpc.enabled" -> "true",
    "spark.ssl.rpc.openSslEnabled" -> "false",
    "spark.ssl.rpc.keyStore" -> keyStore.getPath,
    "spark.ssl.rpc.keyStorePassword" -> Password,
    "spark.ssl.rpc.keyPassword" -> Password,
    "spark.ssl.rpc.trustStore" -> trustStore.getPath,
    "spark.ssl.rpc.trustStorePassword" -> Password)

  private def keytool(args: String*): Unit = {
    val tool = new File(new File(System.getProperty("java.home"), "bin"), "keytool").getPath
    val p = new ProcessBuilder((tool +: args).asJava).redirectErrorStream(true).start()
    val out = new String(p.getInputStream.readAllBytes())
    assert(p.waitFor(60, TimeUnit.SECONDS), "keytool did not end within 60s")
    assert(p.exitValue() == 0, s"keytool ${args.mkString(" ")} failed: $out")
  }

  /** One TLS record's header: content type, protocol version and length. */
  final case class Record(contentType: Int, version: Int, length: Int)

  /**
   * The TLS records `bytes` consists of, or a failure naming the offset where it stops being TLS:
   * every record starts with a content type of 20-23 (change_cipher_spec, alert, handshake,
   * application_data), a 3.x version, and a length of at most 2^14 + 2048 (RFC 8446 5.2).
   */
  def records(bytes: Array[Byte], what: String): Seq[Record] = {
    val out = Seq.newBuilder[Record]
    var i = 0
    while (i < bytes.length) {
      assert(i + 5 <= bytes.length, s"$what: ${bytes.length - i} trailing bytes at offset $i are not a TLS record header")
      val tpe = bytes(i) & 0xff
      val version = ((bytes(i + 1) & 0xff) << 8) | (bytes(i + 2) & 0xff)
      val length = ((bytes(i + 3) & 0xff) << 8) | (bytes(i + 4) & 0xff)
      assert(tpe >= 20 && tpe <= 23, s"$what: byte $i is $tpe, not a TLS content type")
      assert((version >> 8) == 3 && (version & 0xff) <= 4, s"$what: record at $i has version ${version.toHexString}")
      assert(length <= (1 << 14) + 2048, s"$what: record at $i claims $length bytes")
      assert(i + 5 + length <= bytes.length, s"$what: record at $i is cut short")
      out += Record(tpe, version, length)
      i += 5 + length
    }
    out.result()
  }

  /** Whether `needle` occurs in `haystack`. */
  def contains(haystack: Array[Byte], needle: Array[Byte]): Boolean =
    haystack.indexOfSlice(needle.toSeq) >= 0
}

/**
 * A TCP relay on loopback that records what crosses it: a client connects to [[port]], the relay
 * connects to `targetPort` and copies bytes both ways, keeping a copy of each direction of every
 * connection. Lets a test look at the wire between two executors.
 */
final class TestingTcpRelay(targetPort: Int) extends AutoCloseable {
  private val server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress)
  private val sockets = new ConcurrentLinkedQueue[Socket]()
  private val pumps = new ConcurrentLinkedQueue[Thread]()

  /** Per connection: (client to server, server to client). */
  private val captures = new ConcurrentLinkedQueue[(ByteArrayOutputStream, ByteArrayOutputStream)]()
  @volatile private var closed = false

  val port: Int = server.getLocalPort

  private val acceptor = daemon("sluice-test-relay-accept") {
    try {
      while (!closed) {
        val client = server.accept()
        val upstream = new Socket()
        upstream.connect(new InetSocketAddress(InetAddress.getLoopbackAddress, targetPort), 10000)
        sockets.add(client); sockets.add(upstream)
        val capture = (new ByteArrayOutputStream, new ByteArrayOutputStream)
        captures.add(capture)
        pumps.add(pump(client.getInputStream, upstream, capture._1))
        pumps.add(pump(upstream.getInputStream, client, capture._2))
      }
    } catch { case _: SocketException if closed => () }
  }

  private def pump(in: InputStream, to: Socket, copy: ByteArrayOutputStream): Thread = daemon("sluice-test-relay-pump") {
    val out: OutputStream = to.getOutputStream
    val buf = new Array[Byte](8192)
    try {
      var n = in.read(buf)
      while (n >= 0) {
        copy.synchronized(copy.write(buf, 0, n))
        out.write(buf, 0, n)
        out.flush()
        n = in.read(buf)
      }
      to.shutdownOutput()
    } catch {
      case _: java.io.IOException =>
        try to.close()
        catch { case _: Throwable => () }
    }
  }

  private def daemon(name: String)(body: => Unit): Thread = {
    val t = new Thread(() => body, name)
    t.setDaemon(true)
    t.start()
    t
  }

  /** Connections relayed so far. */
  def numConnections: Int = captures.size

  /** What the first connection carried: (client to server, server to client). */
  def firstConnection: (Array[Byte], Array[Byte]) = {
    val (up, down) = captures.peek()
    (up.synchronized(up.toByteArray), down.synchronized(down.toByteArray))
  }

  /** Closes every socket and waits for the copying to end, so the captures are complete. */
  override def close(): Unit = {
    closed = true
    server.close()
    acceptor.join(10000)
    sockets.forEach(s =>
      try s.close()
      catch { case _: Throwable => () })
    pumps.forEach(_.join(10000))
    assert(pumps.asScala.forall(!_.isAlive), "the relay's threads ended")
  }

  /** Waits until the relayed connections ended on their own (both directions saw their end). */
  def awaitEnd(timeoutMs: Long): Boolean = {
    val deadline = System.currentTimeMillis() + timeoutMs
    pumps.forEach(p => p.join(math.max(1L, deadline - System.currentTimeMillis())))
    pumps.asScala.forall(!_.isAlive)
  }
}
