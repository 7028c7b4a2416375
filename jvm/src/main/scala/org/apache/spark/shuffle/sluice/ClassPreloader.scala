package org.apache.spark.shuffle.sluice

import java.io.File
import java.net.URL
import java.nio.file.{Files, Path, Paths}
import java.util.concurrent.atomic.AtomicInteger
import java.util.jar.JarFile

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import org.apache.spark.internal.Logging

/**
 * Loads and links Sluice's classes on a daemon thread when an executor starts, so that its first
 * shuffle tasks, and the transport threads that serve them, find them ready. The JVM loads and
 * verifies a class at its first use; an executor's first map and reduce tasks would otherwise pay
 * that for more than a hundred of Sluice's classes. `getDeclaredConstructors` links a class (which
 * verifies it) without initialising it, so no static initialiser runs early. Spark's executor class
 * loader is parallel-capable (`MutableURLClassLoader`), so a task that needs a class being
 * preloaded waits for that class only. The JDK's counterpart is a CDS archive, made ahead of time.
 *
 * Threads: [[start]] starts one daemon thread, which ends when every class is loaded or [[stop]]
 * asks it to. Thread-safe.
 *
 * @param loader the loader that loads Sluice's classes for tasks (the one that loaded the plugin)
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
        case _: LinkageError | _: ClassNotFoundException | _: SecurityException => failedCount.incrementAndGet()
      }
    }
    logInfo(s"Loaded $loaded of Sluice's classes${if (failed > 0) s" ($failed could not be)" else ""} in " +
      s"${(System.nanoTime() - startNanos) / 1000000L}ms${if (stopped) ", stopped early" else ""}")
  }
}

private[sluice] object ClassPreloader {

  /** The package of the driver's UI and History Server pages: no executor uses it. */
  val DriverOnlyPackage = "org.apache.spark.shuffle.sluice.ui"

  /** The preloader of an executor: every class of Sluice's jar (or class directory) outside [[DriverOnlyPackage]]. */
  def forExecutor(executorId: String): ClassPreloader = {
    val loader = classOf[ClassPreloader].getClassLoader
    val location = Option(classOf[ClassPreloader].getProtectionDomain.getCodeSource).map(_.getLocation)
    new ClassPreloader(loader, () => location.iterator.flatMap(classesAt(_, Set(DriverOnlyPackage))),
      s"sluice-class-preload-$executorId")
  }

  /** The binary names of the classes in the jar or class directory at `location`, outside `excluded` packages. */
  def classesAt(location: URL, excluded: Set[String]): Iterator[String] = {
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
      .filter(n => !excluded.contains(n.substring(0, math.max(0, n.lastIndexOf('.')))))
  }

  private def relative(root: Path, file: Path): String = root.relativize(file).toString.replace(File.separatorChar, '/')
}
