package io.sluice.partition

import java.lang.management.ManagementFactory

/**
 * The finished partition files the executor's Sluice server keeps open between readers. Every
 * reduce task reads each map output of the executor once, so without it a file is opened and
 * closed once per reader: 600,000 times in a job of 1500 maps and 400 reducers, for reads of a
 * hundred bytes each. With it, a file is opened once for every reader that comes while it is kept.
 *
 * It keeps at most `capacity` files (spark.sluice.network.maxOpenPartitionFiles, bounded by the
 * process's open-file limit counted in descriptors, two per kept file, see
 * [[PartitionedFileReaderCache.effectiveCapacity]]; [[numDescriptors]] counts those held). When full, a file
 * that is not kept is opened for its reader alone, and nothing kept is dropped for it: a stage's
 * reducers all read the executor's map outputs in the same order, a scan that would make a
 * least-recently-used cache smaller than the scan drop every file just before its next reader came.
 * A kept file is closed about a second after its last reader came ([[closeIdle]], run by the
 * executor or node shuffle service), which makes room for the next stage's files, so an idle executor holds no partition
 * file open; and at once when it is deleted, so no handle holds a deleted file's disk space.
 *
 * Only the server's read threads read through it. A task thread reading local data keeps a handle of
 * its own ([[PartitionedFileReader.open]]): an interrupted thread closes the NIO channel it reads
 * from (Spark interrupts cancelled tasks), which must not break the other readers of a shared one.
 *
 * Each kept reader holds one reference of its own (see [[PartitionedFileReader]]): a reader that is
 * dropped (idle, or its file deleted) stays open until the views (and reads) that took it have
 * released it, and then closes. Thread-safe; the lock covers map updates only, never a system call.
 */
final class PartitionedFileReaderCache(val capacity: Int) {
  require(capacity >= 0, s"a cache of $capacity open files")

  /** Kept readers with the time of their last acquire, least recently acquired first. */
  private val open = new java.util.LinkedHashMap[PartitionedFile, PartitionedFileReaderCache.Kept](16, 0.75f, true)

  /**
   * A reference to a reader of finished `file`, kept or newly opened; the caller releases it.
   * Fails with an IOException when the file was released or cannot be opened.
   */
  def acquire(file: PartitionedFile): PartitionedFileReader = {
    file.checkReadable()
    if (capacity == 0) return PartitionedFileReader.open(file)
    val now = System.nanoTime()
    val kept = synchronized {
      val k = open.get(file)
      if (k == null) null else { k.lastUsed = now; k.reader }
    }
    if (kept != null && kept.tryRetain()) return kept
    val opened = PartitionedFileReader.open(file) // the caller's reference
    var keptNow = false
    val result = synchronized {
      val other = open.get(file) // kept by another thread meanwhile (a kept reader holds the cache's reference)
      if (other != null && other.reader.tryRetain()) other.reader
      else if (open.size >= capacity) opened // full: this reader is the caller's alone
      else {
        opened.tryRetain() // the cache's reference
        open.put(file, new PartitionedFileReaderCache.Kept(opened, now))
        keptNow = true
        opened
      }
    }
    if (result ne opened) opened.release()
    if (keptNow) {
      // The file's delete looks for its kept reader after marking the file deleted; this looks for
      // the mark after keeping the reader (both volatile), so one of the two drops it.
      file.readerCache = this
      if (file.isDeleted) forget(file)
    }
    result
  }

  /** Drops `file`'s kept reader, if any (its file was deleted). */
  def forget(file: PartitionedFile): Unit = {
    val k = synchronized(open.remove(file))
    if (k != null) k.reader.release()
  }

  /**
   * Drops the readers no reader acquired since `idleSinceNanos` (System.nanoTime); the executor
   * calls it periodically, so files are kept while a stage reads them and closed once it is done.
   */
  def closeIdle(idleSinceNanos: Long): Unit = {
    val idle = synchronized {
      val out = new java.util.ArrayList[PartitionedFileReader]()
      val it = open.values().iterator()
      var done = false
      while (!done && it.hasNext) {
        val k = it.next()
        if (k.lastUsed - idleSinceNanos < 0) { out.add(k.reader); it.remove() }
        else done = true // access order: the rest were acquired later
      }
      out
    }
    PartitionedFileReaderCache.releaseAll(idle)
  }

  /** Drops the readers no reader acquired in the last [[PartitionedFileReaderCache.IdleMs]] (run every half of it). */
  def closeIdle(): Unit = closeIdle(System.nanoTime() - PartitionedFileReaderCache.IdleMs * 1000000L)

  /** Files kept open now. */
  def size: Int = synchronized(open.size)

  /** File descriptors the kept files hold now (a data file's, and its index file's once read). */
  def numDescriptors: Int = synchronized {
    var n = 0
    open.values().forEach(k => n += k.reader.numDescriptors)
    n
  }

  /** Drops every kept reader (the executor stops). */
  def clear(): Unit = {
    val all = synchronized {
      val rs = new java.util.ArrayList[PartitionedFileReader](open.size)
      open.values().forEach(k => rs.add(k.reader))
      open.clear()
      rs
    }
    PartitionedFileReaderCache.releaseAll(all)
  }
}

object PartitionedFileReaderCache {

  /**
   * `configured` bounded so that the kept files hold at most a quarter of this process's
   * open-file limit (where the JVM can tell) in descriptors, [[DescriptorsPerFile]] each: they
   * must leave room for Spark's sockets, jars and spill files.
   */
  def effectiveCapacity(configured: Int): Int = ManagementFactory.getOperatingSystemMXBean match {
    case unix: com.sun.management.UnixOperatingSystemMXBean =>
      capacityFor(configured, unix.getMaxFileDescriptorCount)
    case _ => configured
  }

  /** `configured` files, at most a quarter of `maxDescriptors` in descriptors. */
  private[partition] def capacityFor(configured: Int, maxDescriptors: Long): Int =
    math.max(0L, math.min(configured.toLong, maxDescriptors / 4 / DescriptorsPerFile)).toInt

  /** Descriptors one kept file holds at most: its data file's and its index file's. */
  val DescriptorsPerFile = 2

  /**
   * Releases every one of `readers`, each independently of the others: a release that throws (its
   * channel failed to close) leaks nothing else; the first failure is rethrown afterwards.
   */
  private def releaseAll(readers: java.util.List[PartitionedFileReader]): Unit = {
    var failure: Throwable = null
    readers.forEach { r =>
      try r.release()
      catch {
        case e: Throwable => if (failure == null) failure = e else failure.addSuppressed(e)
      }
    }
    if (failure != null) throw failure
  }

  /** How long a kept file stays open after its last reader came (the executor sweeps twice as often). */
  val IdleMs = 1000L

  /** A kept reader and when it was last acquired (guarded by the cache's lock). */
  private final class Kept(val reader: PartitionedFileReader, var lastUsed: Long)
}
