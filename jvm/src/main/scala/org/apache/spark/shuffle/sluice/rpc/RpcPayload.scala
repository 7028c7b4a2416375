package org.apache.spark.shuffle.sluice.rpc

import java.io.{
  ByteArrayInputStream, ByteArrayOutputStream, InputStream, ObjectInputStream, ObjectOutputStream, ObjectStreamClass
}

/**
 * Sluice's own messages as plain byte arrays for Spark's RPC endpoints (the periodic reports over
 * the plugin RPC have their own compact form, [[ReportCodec]]).
 *
 * Spark deserialises RPC messages with the class loader of its RPC threads, which does not see
 * classes of a jar added with spark.jars / --jars: a Sluice class sent as such breaks the
 * executor's connection to the driver (the executor then exits). So Sluice Java-serialises its
 * messages itself, and reads them back with the class loader that loaded Sluice.
 */
private[sluice] object RpcPayload {

  def encode(message: AnyRef): Array[Byte] = {
    val out = new ByteArrayOutputStream()
    val oos = new ObjectOutputStream(out)
    oos.writeObject(message)
    oos.close()
    out.toByteArray
  }

  def decode(bytes: Array[Byte]): AnyRef = {
    val in = new SluiceObjectInputStream(new ByteArrayInputStream(bytes))
    try in.readObject()
    finally in.close()
  }

  private final class SluiceObjectInputStream(in: InputStream) extends ObjectInputStream(in) {
    override protected def resolveClass(desc: ObjectStreamClass): Class[_] =
      try Class.forName(desc.getName, false, classOf[SluiceObjectInputStream].getClassLoader)
      catch { case _: ClassNotFoundException => super.resolveClass(desc) }
  }
}
