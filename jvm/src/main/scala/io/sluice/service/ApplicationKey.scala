package io.sluice.service

import java.nio.charset.StandardCharsets
import javax.crypto.Mac
import javax.crypto.spec.SecretKeySpec

import org.apache.spark.network.sasl.SecretKeyHolder

/**
 * The key an application's connections to a node shuffle service authenticate with when
 * spark.authenticate is on: an HMAC-SHA256 of the application's secret, so the service (and
 * whoever reads its registrations) never holds the secret itself, which also guards the
 * application's RPC and executors. Spark's own shuffle service receives the secret from YARN
 * instead; no other application can derive another's key. Stateless; thread-safe.
 */
object ApplicationKey {

  private val Label = "sluice node shuffle service".getBytes(StandardCharsets.UTF_8)

  /** The node-service key of the application whose secret is `secret`. */
  def derive(secret: String): String = {
    val mac = Mac.getInstance("HmacSHA256")
    mac.init(new SecretKeySpec(secret.getBytes(StandardCharsets.UTF_8), "HmacSHA256"))
    mac.doFinal(Label).map(b => f"${b & 0xff}%02x").mkString
  }

  /** `base` (the application's secret) as its node-service key, for Spark's authentication. */
  def holder(base: SecretKeyHolder): SecretKeyHolder = new SecretKeyHolder {
    override def getSaslUser(appId: String): String = base.getSaslUser(appId)
    override def getSecretKey(appId: String): String = {
      val secret = base.getSecretKey(appId)
      if (secret == null) null else derive(secret)
    }
  }
}
