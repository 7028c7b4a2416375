package io.sluice.partition

import java.lang.ref.{ReferenceQueue, WeakReference}
import java.util.concurrent.ConcurrentHashMap

import scala.jdk.CollectionConverters._

import io.sluice.config.SluiceOptions
import io.sluice.memory.NetworkBufferPool

/**
 * The executor's registry of result partitions (Flink's ResultPartitionManager): producers
 * register here, readers (the Netty server, local input channels) open views, the Spark layer
 * releases by shuffle. A finished blocking partition is kept as a [[FinishedPartitionTable]] row,
 * its path derived by `layout`, and rebuilt for readers, shared while anyone holds it. A reader of
 * a pipelined partition may wait for it ([[PendingViewRequest]]). Thread-safe.
 *
 * @param ownsFiles whether releasing a finished partition deletes its files: false for the
 *                  partitions of other executors on this host that this executor's readers read
 *                  from disk ([[io.sluice.partition.consumer.HostLocalPartitions]]), which are their
 *                  producers' to delete
 */
final class ResultPartitionManager(
    maxOpenFiles: Int = SluiceOptions.MaxOpenPartitionFiles.default,
    layout: Option[PartitionFileLocator] = None,
    indexCacheBytes: Long = SluiceOptions.IndexCacheSize.default,
    sharedCaches: Option[ResultPartitionManager.Caches] = None,
    ownsFiles: Boolean = true) {

  /** The partition files the server's event loops keep open between readers. */
  val fileReaders: PartitionedFileReaderCache = sharedCaches.fold(
    new PartitionedFileReaderCache(PartitionedFileReaderCache.effectiveCapacity(maxOpenFiles)))(_.fileReaders)

  /** The index files of finished partition files every reader of the executor reads through. */
  val indexCache: PartitionedFileIndexCache =
    sharedCaches.fold(new PartitionedFileIndexCache(indexCacheBytes))(_.indexCache)

  private val partitions = new ConcurrentHashMap[ResultPartitionID, ResultPartition]() // all but finished blocking
  private val finished = new ConcurrentHashMap[Int, FinishedPartitionTable]()
  private val pending = new ConcurrentHashMap[ResultPartitionID, java.util.List[PendingViewRequest]]()
  // Rebuilt finished partitions someone still holds; entries go once collected (`collected`).
  private val rebuilt = new ConcurrentHashMap[ResultPartitionID, ResultPartitionManager.Rebuilt]()
  private val collected = new ReferenceQueue[SortMergeResultPartition]()
  private lazy val noMemory = { // the pool of rebuilt partitions: destroyed, never holds a segment
    val pool = new NetworkBufferPool(1, 4096).createBufferPool(0, 1, "finished blocking partitions", 0L)
    pool.lazyDestroy()
    pool
  }
  @volatile private var shutDown = false

  /** Registers `partition`; its id must not be registered already (IllegalStateException). */
  def registerResultPartition(partition: ResultPartition): Unit =
    registerIfAbsent(partition).foreach { _ =>
      throw new IllegalStateException(s"Result partition ${partition.partitionId} is already registered")
    }

  /**
   * Registers `partition` unless a partition of its id is registered already, as
   * ConcurrentHashMap.putIfAbsent does: None when `partition` was registered (and the readers
   * waiting for it are served), else the partition registered before, `partition` left alone.
   * A finished blocking partition is kept as a table row: readers get a partition over its file.
   */
  def registerIfAbsent(partition: ResultPartition): Option[ResultPartition] = {
    if (shutDown) throw new IllegalStateException("The result partition manager is shut down")
    val id = partition.partitionId
    val previous = Option(lookup(id)).orElse {
      partition match {
        case s: SortMergeResultPartition if s.isFinished && !s.isReleased =>
          val code = layout.fold(-1)(_.code(id, s.file.path))
          var added = false
          finished.compute(id.shuffleId,
            (_, t) => {
              val table = if (t == null) new FinishedPartitionTable(id.shuffleId) else t
              table.synchronized {
                if (table.entryOf(id.producerId) < 0 && !partitions.containsKey(id)) {
                  table.add(id.producerId, s.file, code)
                  added = true
                }
              }
              table
            })
          if (added) None else Option(lookup(id))
        case _ => Option(partitions.putIfAbsent(id, partition))
      }
    }
    if (previous.isEmpty) {
      val waiting = pending.remove(id)
      if (waiting != null) waiting.asScala.toList.foreach(r => r.serve(Option(lookup(id)).getOrElse(partition)))
    }
    previous
  }

  /**
   * Registers the finished blocking partition `id` whose files lie where `layout` finds them for
   * `code`, its totals read from its index file (a node shuffle service serving map outputs an
   * executor wrote and registered with it), unless `id` is registered already. A
   * [[PartitionNotFoundException]] when no finished file of `id` is there; an IOException naming
   * the file when its index does not describe it.
   */
  def registerFinishedFile(id: ResultPartitionID, code: Int): Unit = {
    if (shutDown) throw new IllegalStateException("The result partition manager is shut down")
    if (finishedSubpartitions(id) >= 0 || partitions.containsKey(id)) return
    val locator = layout.getOrElse(throw new IllegalStateException("no layout to find partition files with"))
    val path = locator.file(id, code)
    val file =
      try PartitionedFile.openFinished(path, indexCache)
      catch {
        case _: java.nio.file.NoSuchFileException | _: java.io.FileNotFoundException => throw new PartitionNotFoundException(id)
      }
    finished.compute(id.shuffleId,
      (_, t) => {
        val table = if (t == null) new FinishedPartitionTable(id.shuffleId) else t
        table.synchronized {
          if (table.entryOf(id.producerId) < 0 && !partitions.containsKey(id)) table.add(id.producerId, file, code)
        }
        table
      })
  }

  /**
   * The partition of `id`, or null: a finished blocking one rebuilt from its table row unless
   * someone still holds the one built before.
   */
  private def lookup(id: ResultPartitionID): ResultPartition = {
    val p = partitions.get(id)
    if (p != null) return p
    val t = finished.get(id.shuffleId)
    if (t == null) return null
    expungeCollected()
    t.synchronized {
      val e = t.liveEntryOf(id.producerId)
      if (e < 0) return null
      val held = rebuilt.get(id)
      val p = if (held == null) null else held.get()
      if (p != null) return p
      val file = PartitionedFile.restore(t.path(e, layout), t.numSubpartitions(e), t.iv(e), t.numBuffers(e),
        t.fileLength(e), indexCache, t.grantIndexLoad(e))
      val rebuiltNow = SortMergeResultPartition.adopt(id, file, noMemory)
      file.partition = rebuiltNow // a kept reader of the file keeps the partition, and so this entry
      rebuilt.put(id, new ResultPartitionManager.Rebuilt(id, rebuiltNow, collected))
      rebuiltNow
    }
  }

  private def expungeCollected(): Unit = {
    var r = collected.poll()
    while (r != null) {
      val gone = r.asInstanceOf[ResultPartitionManager.Rebuilt]
      rebuilt.remove(gone.id, gone)
      r = collected.poll()
    }
  }

  /** A view on a registered partition, or PartitionNotFoundException. */
  def createSubpartitionView(id: ResultPartitionID, start: Int, end: Int,
      listener: BufferAvailabilityListener): ResultSubpartitionView = {
    val p = lookup(id)
    if (p == null) throw new PartitionNotFoundException(id)
    p.createSubpartitionView(start, end, listener)
  }

  /**
   * Serves `request` now if the partition is registered, or as soon as it is. Returns false when
   * it was left waiting. The caller owns the request's timeout ([[cancelPending]]).
   */
  def createSubpartitionViewOrWait(id: ResultPartitionID, request: PendingViewRequest): Boolean = {
    val p = lookup(id)
    if (p != null) { request.serve(p); true }
    else {
      // Lists are only changed inside the map's atomic compute calls, and an emptied list leaves
      // the map, so requests for partitions that never come cannot pile up.
      pending.compute(id,
        (_, l) => {
          val list = if (l == null) new java.util.ArrayList[PendingViewRequest]() else l
          list.add(request)
          list
        })
      // The producer may have registered in between; serve it here if so.
      val now = lookup(id)
      if (now != null && removePending(id, request)) request.serve(now)
      false
    }
  }

  def cancelPending(id: ResultPartitionID, request: PendingViewRequest): Unit = removePending(id, request)

  private def removePending(id: ResultPartitionID, request: PendingViewRequest): Boolean = {
    var removed = false
    pending.computeIfPresent(id,
      (_, l) => {
        removed = l.remove(request)
        if (l.isEmpty) null else l
      })
    removed
  }

  /** Partitions some reader is waiting for (they hold no memory beyond their waiting requests). */
  def numPendingPartitions: Int = pending.size

  /** The partition of `id` (a finished blocking one is rebuilt if nobody holds it). */
  def getPartition(id: ResultPartitionID): Option[ResultPartition] = Option(lookup(id))

  /** Whether `id` is a registered blocking partition (nothing is rebuilt to tell). */
  def isBlocking(id: ResultPartitionID): Boolean = {
    val p = partitions.get(id)
    if (p != null) p.partitionType == ResultPartitionType.Blocking
    else {
      val t = finished.get(id.shuffleId)
      t != null && t.synchronized(t.liveEntryOf(id.producerId) >= 0)
    }
  }

  /**
   * The subpartitions of `id` when it is a finished blocking partition kept as a table row, else
   * -1 (a live partition, a released one, or none): what a reader's request is checked against
   * without rebuilding the partition.
   */
  def finishedSubpartitions(id: ResultPartitionID): Int =
    if (partitions.containsKey(id)) -1
    else {
      val t = finished.get(id.shuffleId)
      if (t == null) -1
      else t.synchronized {
        val e = t.liveEntryOf(id.producerId)
        if (e < 0) -1 else t.numSubpartitions(e)
      }
    }

  /** The code of the finished blocking partition `id`'s table row, -1 when it has none. */
  def finishedCode(id: ResultPartitionID): Int = {
    val t = finished.get(id.shuffleId)
    if (t == null) -1
    else t.synchronized {
      val e = t.liveEntryOf(id.producerId)
      if (e < 0) -1 else t.code(e)
    }
  }

  def releasePartition(id: ResultPartitionID, cause: Throwable): Unit = {
    val p = partitions.remove(id)
    if (p != null) p.release(cause)
    val t = finished.get(id.shuffleId)
    if (t != null) {
      val path = t.synchronized {
        val e = t.liveEntryOf(id.producerId)
        if (e < 0) null
        else {
          val f = t.path(e, layout)
          t.remove(id.producerId)
          f
        }
      }
      if (path != null) releaseFinished(id, path, cause)
    }
  }

  /**
   * Releases the finished partition `id`, no longer in its table: its rebuilt partition if held,
   * else its files; without [[ownsFiles]] only forgets it (readers that hold it finish).
   */
  private def releaseFinished(id: ResultPartitionID, path: java.io.File, cause: Throwable): Unit = {
    val held = rebuilt.remove(id)
    val p = if (held == null) null else held.get()
    if (!ownsFiles) indexCache.remove(PartitionedFileIndexCache.key(path))
    else if (p != null) p.release(cause) // deletes the files and drops the server's kept reader
    else { // nobody holds the file: no reader of it is kept, but the cache may still hold its index
      indexCache.remove(PartitionedFileIndexCache.key(path))
      PartitionedFile.deleteFiles(path)
    }
  }

  /** Removes a partition that released itself (a fully consumed pipelined one). */
  def unregister(partition: ResultPartition): Unit = partitions.remove(partition.partitionId, partition)

  /** Releases every partition of a shuffle (Spark's unregisterShuffle); returns how many. */
  def releasePartitionsOfShuffle(shuffleId: Int): Int = {
    val ids = partitions.keySet().asScala.filter(_.shuffleId == shuffleId).toList
    ids.foreach(releasePartition(_, null))
    pending.keySet().asScala.filter(_.shuffleId == shuffleId).foreach(pending.remove)
    ids.size + releaseTable(shuffleId)
  }

  private def releaseTable(shuffleId: Int): Int = {
    val t = finished.remove(shuffleId)
    if (t == null) return 0
    val files = t.synchronized {
      t.released = true
      (0 until t.size).map(e => (ResultPartitionID(shuffleId, t.producerId(e)), t.path(e, layout)))
    }
    var failure: Throwable = null
    files.foreach { case (id, path) =>
      try releaseFinished(id, path, null)
      catch { case e: Throwable => if (failure == null) failure = e else failure.addSuppressed(e) }
    }
    if (failure != null) throw failure
    files.size
  }

  /** The finished, unreleased blocking partitions: what decommissioning can move elsewhere. */
  def finishedBlockingPartitions: Seq[ResultPartitionID] = finished.values().asScala.toSeq.flatMap { t =>
    t.synchronized(if (t.released) Nil else (0 until t.size).map(e => ResultPartitionID(t.shuffleId, t.producerId(e))))
  }

  /** Bytes of the files of [[finishedBlockingPartitions]]. */
  def finishedBlockingBytes: Long = finished.values().asScala.map(t => t.synchronized(t.totalBytes)).sum

  /** Every registered partition's id (tests and tools). */
  def partitionIds: Set[ResultPartitionID] = partitions.keySet().asScala.toSet ++ finishedBlockingPartitions

  def numPartitions: Int = partitions.size + finished.values().asScala.map(t => t.synchronized(t.size)).sum

  /** Rebuilt finished partitions still held by someone, or not yet found collected (tests). */
  private[partition] def numRebuilt: Int = { expungeCollected(); rebuilt.size }

  /**
   * Releases every partition and clears the caches it owns. With `keepFinishedFiles` (a node
   * shuffle service serves this executor's map outputs), finished blocking partitions' files stay
   * where they are for the service; the rest is released as always.
   */
  def shutdown(keepFinishedFiles: Boolean = false): Unit = {
    shutDown = true
    try {
      partitions.keySet().asScala.toList.foreach(releasePartition(_, null))
      if (keepFinishedFiles) finished.clear()
      else finished.keySet().asScala.toList.foreach(releaseTable(_))
    } finally
      if (sharedCaches.isEmpty) {
        try fileReaders.clear()
        finally indexCache.clear()
      }
  }
}

object ResultPartitionManager {

  /** The file readers and index files several managers share (a node service's, one manager per application). */
  final case class Caches(fileReaders: PartitionedFileReaderCache, indexCache: PartitionedFileIndexCache)

  /** A rebuilt finished partition, for as long as a view or a kept file reader holds it. */
  private final class Rebuilt(val id: ResultPartitionID, p: SortMergeResultPartition,
      q: ReferenceQueue[SortMergeResultPartition]) extends WeakReference[SortMergeResultPartition](p, q)
}

/** A reader waiting for a partition that is not registered yet. */
trait PendingViewRequest {

  /** Called once, on the registering thread, with the partition it waited for. */
  def serve(partition: ResultPartition): Unit
}
