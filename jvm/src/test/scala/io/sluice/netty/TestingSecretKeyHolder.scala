package io.sluice.netty

import org.apache.spark.network.sasl.SecretKeyHolder

/** Spark's secret lookup for tests: one secret for every application. */
final class TestingSecretKeyHolder(secret: String) extends SecretKeyHolder {
  override def getSaslUser(appId: String): String = "sparkSaslUser"
  override def getSecretKey(appId: String): String = secret
}

object TestingSecretKeyHolder {

  /** The application id the tests' executors authenticate for. */
  val AppId = "app-20261122-0001"

  /** The `auth` of an executor that authenticates with `secret`. */
  def auth(secret: String): Option[(SecretKeyHolder, String)] = Some((new TestingSecretKeyHolder(secret), AppId))
}
