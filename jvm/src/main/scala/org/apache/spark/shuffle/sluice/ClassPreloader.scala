package org.apache.spark.shuffle.sluice

import java.io.File
import java.net.URL
import java.nio.file.{Files, Path, Paths}
import java.util.concurrent.atomic.AtomicInteger
import java.util.jar.JarFile

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import org.apache.spark.internal.Logging
import org.apache.spark.shuffle.sluice.internal.SparkInternals

/**
 * Loads and links classes on a daemon thread when an executor or a node shuffle service starts, so
 * that the first shuffle tasks, and the transport threads that serve them, find them ready. The
 * JVM loads and verifies a class at its first use; an executor's first map and reduce tasks would
 * otherwise pay that for more than a hundred of Sluice's classes, and a node service's first
 * application's readers for its serving path (Sluice's server, read threads and partition-file
 * readers, and Spark's transport under them). `getDeclaredConstructors` links a class (which
 * verifies it) without initialising it, so no static initialiser runs early, and none can fail
 * here and leave its class unusable. Spark's executor class loader is parallel-capable
 * (`MutableURLClassLoader`), so a task that needs a class being preloaded waits for that class
 * only. A class that cannot be loaded is counted and skipped: preloading never fails its process.
 * The JDK's counterpart is a CDS archive, made ahead of time.
 *
 * Threads: [[start]] starts one daemon thread, which ends when every class is loaded or [[stop]]
 * asks it to. Thread-safe.
 *
 * @param loader the loader that loads the classes for their users (the one that loaded Sluice)
 * @param names  the binary names of the classes to load, computed on the preload thread
 */
private[sluice] final class ClassPreloader(loader: ClassLoader, names: () => Iterator[String], threadName: String)
  extends Logging {

  private val thread = new Thread(() => run(), threadName)
  thread.setDaemon(true)
  @volatile private var stopped = false
  private val loadedCount = new AtomicInteger
  private val failedCount = new AtomicInteger

  def start(): Unit = thread.start()

  /** Asks the thread to end after its current class and waits for it up to `timeoutMs`; whether it ended. */
  def stop(timeoutMs: Long): Boolean = {
    stopped = true
    if (thread.isAlive) {
      try thread.join(timeoutMs)
      catch { case _: InterruptedException => Thread.currentThread().interrupt() }
    }
    !thread.isAlive
  }

  /** Classes loaded and linked (or already loaded) so far. */
  def loaded: Int = loadedCount.get

  /** Classes that could not be loaded or linked (tasks would meet the same error; none expected). */
  def failed: Int = failedCount.get

  def isAlive: Boolean = thread.isAlive

  private def run(): Unit = {
    val startNanos = System.nanoTime()
    val it =
      try names()
      catch { case NonFatal(_) => Iterator.empty }
    while (!stopped && it.hasNext) {
      val name = it.next()
      try {
        Class.forName(name, false, loader).getDeclaredConstructors
        loadedCount.incrementAndGet()
      } catch {
        case _: LinkageError => failedCount.incrementAndGet()
        case NonFatal(_) => failedCount.incrementAndGet() // ClassNotFoundException, SecurityException, ...
      }
    }
    logInfo(s"Loaded $loaded classes${if (failed > 0) s" ($failed could not be)" else ""} in " +
      s"${(System.nanoTime() - startNanos) / 1000000L}ms${if (stopped) ", stopped early" else ""}")
  }
}

private[sluice] object ClassPreloader {

  /** How long a stop waits for the preload thread to end (it ends after the class it is loading). */
  val StopTimeoutMs = 1000L

  /** The package of the driver's UI and History Server pages: no executor uses it. */
  val DriverOnlyPackage = "org.apache.spark.shuffle.sluice.ui"

  /**
   * The packages of Sluice's jar an executor preloads: those of its shuffle tasks' data path (the
   * Spark boundary's writer and reader, record writers and serialization, the input gate, result
   * partitions and their files, the transport, buffers and memory). The rest is either loaded by
   * the executor's start before the preload thread runs (settings, metrics, the driver's RPC
   * messages, the adapter to Spark) or never by an executor (the driver's UI, the node service);
   * the few classes of those packages a task uses (its metrics) load on first use. An executor
   * running a job without the preloader loaded about 330 of Sluice's classes, 250 of them in these
   * packages; preloading every package loaded 570.
   */
  val ExecutorPackages: Set[String] = Set("org.apache.spark.shuffle.sluice", "io.sluice.writer",
    "io.sluice.serialization", "io.sluice.partition", "io.sluice.partition.consumer", "io.sluice.netty",
    "io.sluice.buffer", "io.sluice.memory")

  /**
   * The packages of Sluice's jar a node shuffle service serves with: its registry and server, the
   * transport and its wire messages, partition files and their readers, buffers and memory, settings
   * (its platform adapter is loaded already: it started the service).
   */
  val ServingPackages: Set[String] = Set("io.sluice.service", "io.sluice.netty", "io.sluice.partition",
    "io.sluice.buffer", "io.sluice.memory", "io.sluice.config")

  /**
   * The packages of Spark's network-common jar under a node shuffle service's connections: Spark's
   * transport server, its RPC messages, authentication and TLS (not Spark's own shuffle protocol).
   */
  val SparkServingPackages: Set[String] = Set("client", "server", "protocol", "buffer", "util", "crypto", "sasl", "ssl")
    .map("org.apache.spark.network." + _)

  /** The preloader of an executor: the classes of Sluice's jar (or class directory) in [[ExecutorPackages]]. */
  def forExecutor(executorId: String): ClassPreloader =
    new ClassPreloader(sluiceLoader, () => executorClasses, s"sluice-class-preload-$executorId")

  /** The binary names [[forExecutor]] loads. */
  def executorClasses: Iterator[String] = classesOf(classOf[ClassPreloader], ExecutorPackages.contains)

  /**
   * The preloader of a node shuffle service (the daemon, YARN's auxiliary service): the classes of
   * its serving path, in [[ServingPackages]] of Sluice's jar and [[SparkServingPackages]] of
   * Spark's network-common jar, so that its first application's readers do not load them.
   */
  def forNodeService(): ClassPreloader =
    new ClassPreloader(sluiceLoader, () => servingClasses, "sluice-class-preload-service")

  /** The binary names [[forNodeService]] loads: Sluice's serving classes, then Spark's. */
  def servingClasses: Iterator[String] =
    classesOf(classOf[ClassPreloader], ServingPackages.contains) ++
      classesOf(SparkInternals.networkCommonClass, SparkServingPackages.contains)

  private def sluiceLoader: ClassLoader = classOf[ClassPreloader].getClassLoader

  /**
   * The classes of the jar (or class directory) `anchor` was loaded from whose package `keep`
   * keeps, listed when first asked; none when that location cannot be read.
   */
  def classesOf(anchor: Class[_], keep: String => Boolean): Iterator[String] =
    Iterator.single(anchor).flatMap { a =>
      try Option(a.getProtectionDomain.getCodeSource).map(_.getLocation).map(classesIn(_, keep).toList).getOrElse(Nil)
      catch { case NonFatal(_) => Nil }
    }

  /** The binary names of the classes in the jar or class directory at `location`, outside `excluded` packages. */
  def classesAt(location: URL, excluded: Set[String]): Iterator[String] = classesIn(location, p => !excluded.contains(p))

  /** The binary names of the classes in the jar or class directory at `location` whose package `keep` keeps. */
  def classesIn(location: URL, keep: String => Boolean): Iterator[String] = {
    val path = Paths.get(location.toURI)
    val files: Seq[String] =
      if (Files.isDirectory(path)) {
        val walk = Files.walk(path)
        try walk.iterator.asScala.filter(Files.isRegularFile(_)).map(p => relative(path, p)).toList
        finally walk.close()
      } else {
        val jar = new JarFile(path.toFile)
        try jar.entries.asScala.map(_.getName).toList
        finally jar.close()
      }
    files.iterator.filter(n => n.endsWith(".class") && !n.startsWith("META-INF/") && !n.endsWith("module-info.class"))
      .map(_.stripSuffix(".class").replace('/', '.'))
      .filter(n => keep(n.substring(0, math.max(0, n.lastIndexOf('.')))))
  }

  private def relative(root: Path, file: Path): String = root.relativize(file).toString.replace(File.separatorChar, '/')
}
