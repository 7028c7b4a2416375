package org.apache.spark.shuffle.sluice.internal

import scala.jdk.CollectionConverters._

import io.sluice.config.{SluiceConf, SluiceOptions}
import io.sluice.netty.PartitionRequestClientFactory
import org.apache.spark.network.util.{ConfigProvider, TransportConf}

/**
 * The Spark-configuration surgery of the transport, in one place on the Spark boundary: Sluice's own
 * network settings laid over Spark's TransportConf for module "sluice", checked for TLS keys. The engine's [[io.sluice.netty.NettyConnectionManager]] receives the finished
 * TransportConf. Stateless.
 */
object TransportConfOverlay {

  /**
   * `base` with Sluice's thread counts and connect timeout laid over its `spark.<module>.io.*`
   * keys: a positive Sluice setting wins; 0 keeps the TransportConf's own value when it has one,
   * else min(cores, 8). Refuses spark.ssl.rpc.enabled without the keys it needs, naming them
   * (Spark's own check says only that keys were not found).
   */
  def apply(base: TransportConf, conf: SluiceConf): TransportConf = {
    val module = base.getModuleName
    val cores = Runtime.getRuntime.availableProcessors()
    def threads(sluice: Int, existing: Int): Int =
      if (sluice > 0) sluice else if (existing > 0) existing else math.min(cores, 8)
    val connectSeconds = math.max(1L, (PartitionRequestClientFactory.connectTimeoutMs(conf) + 999) / 1000)
    val overrides = Map(
      s"spark.$module.io.serverThreads" -> threads(conf.get(SluiceOptions.ServerThreads), base.serverThreads()).toString,
      s"spark.$module.io.clientThreads" -> threads(conf.get(SluiceOptions.ClientThreads), base.clientThreads()).toString,
      s"spark.$module.io.connectionCreationTimeout" -> s"${connectSeconds}s")
    val finished = new TransportConf(module, new OverlayConfigProvider(base, overrides))
    checkTls(finished)
    finished
  }

  private def checkTls(tconf: TransportConf): Unit = if (tconf.sslRpcEnabled() && !tconf.sslRpcEnabledAndKeysAreValid()) {
    val missing =
      if (tconf.sslRpcOpenSslEnabled()) s"spark.ssl.rpc.privateKey (${tconf.sslRpcPrivateKey()}) and " +
      s"spark.ssl.rpc.certChain (${tconf.sslRpcCertChain()}) are not both existing files (with " +
      "spark.ssl.rpc.openSslEnabled=true they hold the keys)"
      else s"spark.ssl.rpc.keyStore (${tconf.sslRpcKeyStore()}) is not an existing file"
    throw new IllegalArgumentException(s"spark.ssl.rpc.enabled is true but $missing: Sluice's shuffle " +
      "connections cannot be TLS without keys")
  }

  /** A TransportConf's settings with some replaced. */
  private final class OverlayConfigProvider(base: TransportConf, overrides: Map[String, String]) extends ConfigProvider {
    override def get(name: String): String = overrides.get(name) match {
      case Some(v) => v
      case None =>
        val v = base.get(name, null)
        if (v == null) throw new java.util.NoSuchElementException(name)
        v
    }

    /** Only TransportConf.cryptoConf enumerates settings: rebuild its spark.network.crypto.config.* entries. */
    override def getAll: java.lang.Iterable[java.util.Map.Entry[String, String]] = {
      val crypto = base.cryptoConf().stringPropertyNames().asScala.toSeq.map { k =>
        "spark.network.crypto.config." + k.stripPrefix("commons.crypto.") -> base.cryptoConf().getProperty(k)
      }
      (crypto.toMap ++ overrides).asJava.entrySet()
    }
  }
}
