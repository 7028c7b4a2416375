package org.apache.spark.shuffle.sluice

import org.apache.spark.SparkConf
import org.apache.spark.rpc.{RpcEndpoint, RpcEndpointRef, RpcEnv}

/**
 * One of Sluice's small driver endpoints, by name: set up once on the driver when first needed,
 * and reached from executors through a reference looked up once. Thread-safe.
 */
private[sluice] final class LazyDriverEndpoint(val name: String) {

  @volatile private var endpoint: RpcEndpointRef = _
  @volatile private var executorRef: RpcEndpointRef = _

  /** Sets up the endpoint `create` makes, unless it is set up already (the driver). */
  def ensure(rpcEnv: RpcEnv)(create: => RpcEndpoint): Unit = if (endpoint == null) synchronized {
    if (endpoint == null) endpoint = rpcEnv.setupEndpoint(name, create)
  }

  /** The driver's endpoint, as an executor reaches it. */
  def ref(conf: SparkConf, rpcEnv: RpcEnv): RpcEndpointRef = {
    val r = executorRef
    if (r != null) r else synchronized {
      if (executorRef == null) executorRef = SparkInternals.driverEndpointRef(name, conf, rpcEnv)
      executorRef
    }
  }

  /** Forgets both (the shuffle manager stopped; a new SparkContext sets them up again). */
  def reset(): Unit = synchronized { executorRef = null; endpoint = null }
}
