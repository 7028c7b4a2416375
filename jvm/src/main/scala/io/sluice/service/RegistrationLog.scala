package io.sluice.service

import java.io.{BufferedWriter, File, IOException, OutputStreamWriter}
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, StandardCopyOption, StandardOpenOption}
import java.nio.file.attribute.PosixFilePermissions

import scala.jdk.CollectionConverters._

/**
 * What a node shuffle service must not forget when it restarts: which applications registered
 * (and their keys) and which dirs their executors registered, appended as lines to
 * `registrations.log` in the service's recovery dir and replayed at start, so executors that
 * outlive a service restart (a NodeManager restart, a DaemonSet update) keep their outputs
 * readable (Spark's YARN shuffle service keeps its registrations in a recovery database for the
 * same reason). The file is compacted at start and is readable by the service's user only (it
 * holds applications' node-service keys, never their secrets). Thread-safe.
 */
private[service] final class RegistrationLog(dir: File) {
  import RegistrationLog._

  private val file = new File(dir, FileName)
  private var out: BufferedWriter = _ // guarded by this

  /** The registrations the log holds, in order, having dropped removed applications; rewrites it compacted. */
  def replay(): Seq[Entry] = synchronized {
    if (!dir.isDirectory && !dir.mkdirs() && !dir.isDirectory) throw new IOException(s"cannot create the recovery dir $dir")
    val entries = if (file.isFile) Files.readAllLines(file.toPath, StandardCharsets.UTF_8).asScala.flatMap(parse) else Nil
    val live = scala.collection.mutable.ArrayBuffer.empty[Entry]
    entries.foreach {
      case Removed(app) => live.filterInPlace(_.appId != app)
      case e => live += e
    }
    val compacted = new File(dir, FileName + ".new")
    Files.write(compacted.toPath, live.map(format).asJava, StandardCharsets.UTF_8)
    restrict(compacted)
    Files.move(compacted.toPath, file.toPath, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE)
    open()
    live.toSeq
  }

  def record(e: Entry): Unit = synchronized {
    if (out == null) open()
    out.write(format(e))
    out.newLine()
    out.flush()
  }

  def close(): Unit = synchronized {
    if (out != null) { out.close(); out = null }
  }

  private def open(): Unit = {
    out = new BufferedWriter(new OutputStreamWriter(Files.newOutputStream(file.toPath, StandardOpenOption.CREATE,
          StandardOpenOption.APPEND), StandardCharsets.UTF_8))
    restrict(file)
  }

  private def restrict(f: File): Unit =
    try Files.setPosixFilePermissions(f.toPath, PosixFilePermissions.fromString("rw-------"))
    catch { case _: UnsupportedOperationException => () }

}

private[service] object RegistrationLog {

  val FileName = "registrations.log"

  sealed trait Entry { def appId: String }
  final case class Application(appId: String, key: Option[String]) extends Entry
  final case class Executor(appId: String, executorId: String, dirs: Seq[String]) extends Entry
  final case class Removed(appId: String) extends Entry

  /** Whether `s` can be written into the log (and is a sensible id or path): no tab, line break or NUL. */
  def writable(s: String): Boolean = s.nonEmpty && !s.exists(c => c == '\t' || c == '\n' || c == '\r' || c == '\u0000')

  private def format(e: Entry): String = e match {
    case Application(app, key) => s"A\t$app\t${key.getOrElse("-")}"
    case Executor(app, executor, dirs) => (Seq("E", app, executor) ++ dirs).mkString("\t")
    case Removed(app) => s"R\t$app"
  }

  private def parse(line: String): Option[Entry] = line.split('\t').toList match {
    case "A" :: app :: key :: Nil => Some(Application(app, if (key == "-") None else Some(key)))
    case "E" :: app :: executor :: dirs if dirs.nonEmpty => Some(Executor(app, executor, dirs))
    case "R" :: app :: Nil => Some(Removed(app))
    case _ => None // a line cut short by a crash
  }
}
