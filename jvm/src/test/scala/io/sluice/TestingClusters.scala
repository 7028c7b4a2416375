package io.sluice

import org.apache.spark.shuffle.sluice.bench.SimulatedCluster
import org.scalatest.Assertions._

/**
 * N simulated executors in this JVM for one test ([[SimulatedCluster]]): one call starts them, runs
 * the body, shuts them all down and fails the test unless every executor's network memory came
 * back whole and its threads ended (the multi-executor form of `TestingBufferPools`).
 */
object TestingClusters {

  def withSimulatedCluster[T](n: Int, slots: Int = 2, settings: Map[String, String] = Map.empty)(
      body: SimulatedCluster => T): T = {
    val cluster = SimulatedCluster.start(n, slots, settings)
    val result =
      try body(cluster)
      catch {
        case e: Throwable =>
          try cluster.shutdown().foreach(p => e.addSuppressed(new AssertionError(p)))
          catch { case s: Throwable => e.addSuppressed(s) }
          throw e
      }
    val problems = cluster.shutdown()
    assert(problems.isEmpty,
      s"the simulated cluster of $n executors did not give everything back:\n  " +
        problems.mkString("\n  "))
    result
  }
}
