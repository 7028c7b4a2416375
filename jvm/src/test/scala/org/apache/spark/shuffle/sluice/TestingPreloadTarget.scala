package org.apache.spark.shuffle.sluice

/**
 * An object whose initialiser says that it ran (a system property): [[ClassPreloaderSuite]] preloads
 * its class and checks that preloading did not initialise it. Nothing else may touch it.
 */
object TestingPreloadTarget {
  System.setProperty("sluice.test.preloadTargetInitialised", "true")
}
