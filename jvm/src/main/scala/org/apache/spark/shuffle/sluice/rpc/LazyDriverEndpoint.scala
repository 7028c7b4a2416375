package org.apache.spark.shuffle.sluice.rpc

import org.apache.spark.shuffle.sluice.internal.SparkInternals

/**
 * One of Sluice's small driver endpoints, by name: set up once on the driver when first needed,
 * and reached from executors through a reference looked up once. Thread-safe.
 */
private[sluice] final class LazyDriverEndpoint(val name: String) {

  @volatile private var endpointSet = false
  @volatile private var executorRef: SparkInternals.DriverEndpointRef = _

  /** Sets up the endpoint `create` makes, unless it is set up already (the driver). */
  def ensure(create: => SparkInternals.DriverEndpoint): Unit = if (!endpointSet) synchronized {
    if (!endpointSet) {
      SparkInternals.setupDriverEndpoint(name, create)
      endpointSet = true
    }
  }

  /** The driver's endpoint, as an executor reaches it. */
  def ref: SparkInternals.DriverEndpointRef = {
    val r = executorRef
    if (r != null) r
    else synchronized {
      if (executorRef == null) executorRef = SparkInternals.driverEndpointRef(name)
      executorRef
    }
  }

  /** Forgets both (the shuffle manager stopped; a new SparkContext sets them up again). */
  def reset(): Unit = synchronized { executorRef = null; endpointSet = false }
}
