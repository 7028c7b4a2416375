package io.sluice.service

import java.io.{ByteArrayInputStream, ByteArrayOutputStream, DataInputStream, DataOutputStream, IOException}
import java.nio.ByteBuffer

/**
 * The control messages of a node shuffle service (the role of Spark's RegisterExecutor and
 * RemoveShuffle messages to its external shuffle service), sent as Spark RPCs on a connection to
 * the service before or instead of the upgrade to the Sluice protocol. Each is
 * {{{
 *   magic "SLSV" (int) | version (byte) | type (byte) | fields (Java DataOutput: UTF strings, ints)
 * }}}
 * and is answered with a reply of the same framing (type 0) or refused with an error message
 * naming what is wrong. Only [[ServiceMessages.RegisterApplication]] may come before Spark's
 * authentication (it is how the service learns the application's key); the others are checked
 * against the application the connection authenticated as. Immutable; stateless codec.
 */
object ServiceMessages {

  private val Magic = 0x534c5356 // "SLSV"
  private val Version: Byte = 1

  sealed trait Message { def appId: String }

  /**
   * The application's node-service key ([[ApplicationKey]]) or none (spark.authenticate off): the
   * first registration of an application sets it, later ones must carry the same.
   */
  final case class RegisterApplication(appId: String, key: Option[String]) extends Message

  /** Executor `executorId` of `appId` writes its map outputs into `dirs` (Sluice's own, in this order). */
  final case class RegisterExecutor(appId: String, executorId: String, dirs: Seq[String]) extends Message

  /**
   * The application's driver is alive (a daemon removes an application nobody speaks for). The
   * answer: how long the application may stay silent, or [[NotRegistered]].
   */
  final case class ApplicationAlive(appId: String) extends Message

  /**
   * What a service answers [[ApplicationAlive]] with when it holds no registration of the
   * application: it restarted without a recovery dir, or removed the application.
   */
  val NotRegistered = "not registered"

  /** Spark dropped shuffle `shuffleId`: its files go, whichever executor of `appId` wrote them. */
  final case class RemoveShuffle(appId: String, shuffleId: Int) extends Message

  /** The application ended: everything the service holds of it goes. */
  final case class RemoveApplication(appId: String) extends Message

  /** What the service holds and serves, as JSON; `appId` empty: every application's summary. */
  final case class Status(appId: String) extends Message

  /** The answer to every message: a text (JSON for [[Status]], how long an application may stay silent for the rest). */
  final case class Reply(text: String)

  private object Type {
    val Reply: Byte = 0
    val RegisterApplication: Byte = 1
    val RegisterExecutor: Byte = 2
    val ApplicationAlive: Byte = 3
    val RemoveShuffle: Byte = 4
    val RemoveApplication: Byte = 5
    val Status: Byte = 6
  }

  def encode(m: Message): ByteBuffer = frame { (out, typeOf) =>
    m match {
      case RegisterApplication(app, key) =>
        typeOf(Type.RegisterApplication); out.writeUTF(app); out.writeBoolean(key.isDefined); key.foreach(out.writeUTF)
      case RegisterExecutor(app, executor, dirs) =>
        typeOf(Type.RegisterExecutor); out.writeUTF(app); out.writeUTF(executor); out.writeInt(dirs.size)
        dirs.foreach(out.writeUTF)
      case ApplicationAlive(app) => typeOf(Type.ApplicationAlive); out.writeUTF(app)
      case RemoveShuffle(app, shuffle) => typeOf(Type.RemoveShuffle); out.writeUTF(app); out.writeInt(shuffle)
      case RemoveApplication(app) => typeOf(Type.RemoveApplication); out.writeUTF(app)
      case Status(app) => typeOf(Type.Status); out.writeUTF(app)
    }
  }

  def encodeReply(r: Reply): ByteBuffer = frame { (out, typeOf) =>
    typeOf(Type.Reply)
    writeLongText(out, r.text)
  }

  /** Whether `message` is one of the service's (its magic), without consuming it. */
  def isServiceMessage(message: ByteBuffer): Boolean = message.remaining() >= 4 && message.getInt(message.position()) == Magic

  /** The message in `bytes` (an IOException naming what is wrong when it is none or is malformed). */
  def decode(bytes: ByteBuffer): Message = read(bytes) { (typ, in) =>
    typ match {
      case Type.RegisterApplication =>
        val app = in.readUTF()
        RegisterApplication(app, if (in.readBoolean()) Some(in.readUTF()) else None)
      case Type.RegisterExecutor =>
        val app = in.readUTF()
        val executor = in.readUTF()
        val n = in.readInt()
        if (n < 1 || n > MaxDirs) throw new IOException(s"a registration of $n local dirs")
        RegisterExecutor(app, executor, Seq.fill(n)(in.readUTF()))
      case Type.ApplicationAlive => ApplicationAlive(in.readUTF())
      case Type.RemoveShuffle => RemoveShuffle(in.readUTF(), in.readInt())
      case Type.RemoveApplication => RemoveApplication(in.readUTF())
      case Type.Status => Status(in.readUTF())
      case other => throw new IOException(s"unknown node service message type $other")
    }
  }

  def decodeReply(bytes: ByteBuffer): Reply = read(bytes) { (typ, in) =>
    if (typ != Type.Reply) throw new IOException(s"a reply of type $typ")
    Reply(readLongText(in))
  }

  /** The most local dirs one executor registers. */
  val MaxDirs = 1024

  private def frame(write: (DataOutputStream, Byte => Unit) => Unit): ByteBuffer = {
    val bytes = new ByteArrayOutputStream()
    val out = new DataOutputStream(bytes)
    out.writeInt(Magic)
    out.writeByte(Version)
    write(out, t => out.writeByte(t))
    out.flush()
    ByteBuffer.wrap(bytes.toByteArray)
  }

  private def read[T](bytes: ByteBuffer)(body: (Byte, DataInputStream) => T): T = {
    val copy = new Array[Byte](bytes.remaining())
    bytes.duplicate().get(copy)
    val in = new DataInputStream(new ByteArrayInputStream(copy))
    try {
      if (in.readInt() != Magic) throw new IOException("not a Sluice node service message")
      val version = in.readByte()
      if (version != Version) {
        throw new IOException(s"node service message version $version, this Sluice reads version $Version: the " +
          "service and the application must run the same Sluice release")
      }
      body(in.readByte(), in)
    } catch {
      case e: java.io.EOFException => throw new IOException("a node service message that ends early", e)
    }
  }

  private def writeLongText(out: DataOutputStream, text: String): Unit = {
    val b = text.getBytes(java.nio.charset.StandardCharsets.UTF_8)
    out.writeInt(b.length)
    out.write(b)
  }

  private def readLongText(in: DataInputStream): String = {
    val n = in.readInt()
    if (n < 0 || n > (64 << 20)) throw new IOException(s"a text of $n bytes")
    val b = new Array[Byte](n)
    in.readFully(b)
    new String(b, java.nio.charset.StandardCharsets.UTF_8)
  }
}
