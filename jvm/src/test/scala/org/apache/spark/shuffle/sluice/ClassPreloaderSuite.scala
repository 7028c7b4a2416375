package org.apache.spark.shuffle.sluice

import java.net.{URL, URLClassLoader}
import java.util.concurrent.CountDownLatch

import io.sluice.TestingThreads
import org.scalatest.funsuite.AnyFunSuite

/**
 * The executor's class preloader loads and links Sluice's classes on its own daemon thread,
 * through the loader it is given and without initialising them, then ends; stop ends it early.
 */
class ClassPreloaderSuite extends AnyFunSuite {

  /** Sluice's main classes (a directory under Gradle, a jar elsewhere). */
  private val sluiceLocation: URL = classOf[ClassPreloader].getProtectionDomain.getCodeSource.getLocation

  private val testLocation: URL = classOf[ClassPreloaderSuite].getProtectionDomain.getCodeSource.getLocation

  /** Loads Sluice's classes (main and test) itself, not through its parent, and says which it has loaded. */
  private final class IsolatedLoader
    extends URLClassLoader(Array(sluiceLocation, testLocation), classOf[ClassPreloaderSuite].getClassLoader) {
    override protected def loadClass(name: String, resolve: Boolean): Class[_] = getClassLoadingLock(name).synchronized {
      val own = name.startsWith("io.sluice.") || name.startsWith("org.apache.spark.shuffle.sluice.")
      if (!own) super.loadClass(name, resolve)
      else Option(findLoadedClass(name)).getOrElse(findClass(name))
    }
    def isLoaded(name: String): Boolean = findLoadedClass(name) != null
  }

  test("the classes of Sluice's jar, without the driver's UI") {
    val names = ClassPreloader.classesAt(sluiceLocation, Set(ClassPreloader.DriverOnlyPackage)).toSet
    assert(names.contains(classOf[SluiceShuffleWriter[_, _]].getName))
    assert(names.contains("io.sluice.partition.consumer.SingleInputGate"))
    assert(names.contains("io.sluice.netty.CreditBasedPartitionRequestClientHandler"))
    assert(!names.exists(_.startsWith(ClassPreloader.DriverOnlyPackage + ".")))
    assert(names.forall(n => !n.endsWith(".class") && !n.contains('/')), names.take(5))
  }

  test("an executor's preload is its tasks' data path; a node service's is its serving path") {
    val executor = ClassPreloader.executorClasses.toSet
    val dataPath = Seq("io.sluice.partition.SortMergeResultPartition", "io.sluice.partition.consumer.SingleInputGate",
      "io.sluice.netty.CreditBasedPartitionRequestClientHandler", "io.sluice.writer.RecordWriter",
      "io.sluice.memory.NetworkBufferPool", classOf[SluiceShuffleWriter[_, _]].getName,
      classOf[SluiceShuffleReader[_, _]].getName)
    assert(dataPath.forall(executor.contains), dataPath.filterNot(executor.contains))
    assert(!executor.exists(_.startsWith("io.sluice.service.")), "the service's engine: no executor serves")
    assert(!executor.contains("org.apache.spark.shuffle.sluice.service.SluiceYarnShuffleService"))
    // Loaded by the executor's start (settings, metrics, the adapter and its checks) or only on the driver (UI).
    val notOnThePath = Seq("io.sluice.config.SluiceOptions$", "io.sluice.metrics.ExecutorSnapshot",
      "org.apache.spark.shuffle.sluice.internal.SparkInternalsCheck$", "org.apache.spark.shuffle.sluice.ui.SluiceTab")
    assert(!notOnThePath.exists(executor.contains), notOnThePath.filter(executor.contains))
    val serving = ClassPreloader.servingClasses.toSet
    val expected = Seq("io.sluice.service.ApplicationRegistry", "io.sluice.netty.PartitionRequestQueue",
      "io.sluice.netty.PackedBufferResponse", "io.sluice.partition.PartitionedFileReader",
      "io.sluice.partition.PartitionReadScheduler", "io.sluice.memory.NetworkBufferPool",
      "org.apache.spark.network.server.TransportRequestHandler", "org.apache.spark.network.crypto.AuthRpcHandler")
    assert(expected.forall(serving.contains), expected.filterNot(serving.contains))
    val notServing = Seq("io.sluice.partition.consumer.SingleInputGate", "io.sluice.writer.RecordWriter",
      classOf[SluiceShuffleWriter[_, _]].getName, "org.apache.spark.network.shuffledb.DBBackend")
    assert(!notServing.exists(serving.contains), notServing.filter(serving.contains))
    assert(!serving.exists(_.startsWith("org.sparkproject.")), "Spark's shaded Guava is no serving class")
  }

  test("a node service's preload loads its serving classes; a missing class or code source fails nothing") {
    val loader = new IsolatedLoader
    val hot = "io.sluice.netty.PartitionRequestQueue"
    assert(!loader.isLoaded(hot))
    val unreadable = ClassPreloader.classesOf(classOf[String], _ => true) // the JDK's: no code source to list
    val names = () => ClassPreloader.servingClasses ++ unreadable ++ Iterator("io.sluice.NoSuchClass")
    val p = new ClassPreloader(loader, names, "sluice-class-preload-service-test")
    p.start()
    TestingThreads.eventually(timeoutMs = 120000L, what = "the preload thread's end")(!p.isAlive)
    val expected = ClassPreloader.servingClasses.size
    assert(p.failed == 1 && p.loaded == expected, s"loaded ${p.loaded} of $expected, ${p.failed} failed")
    assert(loader.isLoaded(hot) && loader.isLoaded("io.sluice.service.ApplicationRegistry"))
    loader.close()
  }

  test("loads every class through the given loader on a daemon thread that then ends, initialising none") {
    val loader = new IsolatedLoader
    // By name: linking to it here would initialise the test loader's own copy.
    val target = "org.apache.spark.shuffle.sluice.TestingPreloadTarget$"
    val names = ClassPreloader.classesAt(sluiceLocation, Set(ClassPreloader.DriverOnlyPackage)).toList :+ target
    val hot = "io.sluice.partition.SortMergeResultPartition"
    assert(!loader.isLoaded(hot) && !loader.isLoaded(target))
    val p = new ClassPreloader(loader, () => names.iterator, "sluice-class-preload-test")
    p.start()
    TestingThreads.eventually(timeoutMs = 120000L, what = "the preload thread's end")(!p.isAlive)
    assert(p.loaded == names.size && p.failed == 0, s"loaded ${p.loaded} of ${names.size}, ${p.failed} failed")
    assert(loader.isLoaded(hot) && loader.isLoaded("io.sluice.netty.NettyMessageDecoder") && loader.isLoaded(target))
    assert(Class.forName(hot, false, loader).getClassLoader eq loader, "loaded by the given loader, not its parent")
    assert(System.getProperty("sluice.test.preloadTargetInitialised") == null, "a static initialiser ran")
    assert(p.stop(timeoutMs = 1000L))
    loader.close()
  }

  test("stop ends the thread before it has loaded everything; no thread is left behind") {
    val entered = new CountDownLatch(1)
    val release = new CountDownLatch(1)
    val names = Iterator("io.sluice.netty.NettyProtocol") ++ Iterator.continually {
      entered.countDown(); release.await(); "io.sluice.netty.NettyMessage"
    }
    val p = new ClassPreloader(new IsolatedLoader, () => names, "sluice-class-preload-stop-test")
    p.start()
    entered.await()
    assert(p.isAlive)
    release.countDown()
    assert(p.stop(timeoutMs = 60000L) && !p.isAlive, "stop ended the thread")
    assert(p.loaded >= 1 && p.failed == 0)
  }

  test("a class that cannot be loaded is counted, and the rest still load") {
    val p = new ClassPreloader(new IsolatedLoader, () => Iterator("io.sluice.NoSuchClass", "io.sluice.netty.NettyProtocol"),
      "sluice-class-preload-missing-test")
    p.start()
    TestingThreads.eventually(timeoutMs = 60000L, what = "the preload thread's end")(!p.isAlive)
    assert(p.failed == 1 && p.loaded == 1)
  }
}
