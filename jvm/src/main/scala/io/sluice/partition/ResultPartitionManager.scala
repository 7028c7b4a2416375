package io.sluice.partition

import java.util.concurrent.ConcurrentHashMap

import scala.jdk.CollectionConverters._

import io.sluice.config.SluiceOptions

/**
 * The executor's registry of result partitions (Flink's ResultPartitionManager): producers
 * register their partitions here, readers (the Netty server for remote consumers, local input
 * channels for local ones) open views on them, and the Spark layer releases them by shuffle.
 *
 * A reader of a pipelined partition may arrive before its producer has started; it can leave a
 * [[PendingViewRequest]] that is served the moment the partition is registered. Finished
 * partition files stay open for the server's readers in [[fileReaders]] (at most `maxOpenFiles`,
 * spark.sluice.network.maxOpenPartitionFiles).
 * Thread-safe.
 */
final class ResultPartitionManager(maxOpenFiles: Int = SluiceOptions.MaxOpenPartitionFiles.default) {

  /** The partition files the server's event loops keep open between readers. */
  val fileReaders = new PartitionFileReaderCache(PartitionFileReaderCache.effectiveCapacity(maxOpenFiles))

  private val partitions = new ConcurrentHashMap[ResultPartitionID, ResultPartition]()
  private val pending = new ConcurrentHashMap[ResultPartitionID, java.util.List[PendingViewRequest]]()
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
   */
  def registerIfAbsent(partition: ResultPartition): Option[ResultPartition] = {
    if (shutDown) throw new IllegalStateException("The result partition manager is shut down")
    val previous = partitions.putIfAbsent(partition.partitionId, partition)
    if (previous == null) {
      val waiting = pending.remove(partition.partitionId)
      if (waiting != null) waiting.asScala.toList.foreach(_.serve(partition))
    }
    Option(previous)
  }

  /** A view on a registered partition, or PartitionNotFoundException. */
  def createSubpartitionView(id: ResultPartitionID, start: Int, end: Int,
      listener: BufferAvailabilityListener): ResultSubpartitionView = {
    val p = partitions.get(id)
    if (p == null) throw new PartitionNotFoundException(id)
    p.createSubpartitionView(start, end, listener)
  }

  /**
   * Serves `request` now if the partition is registered, or as soon as it is. Returns false when
   * it was left waiting. The caller owns the request's timeout ([[cancelPending]]).
   */
  def createSubpartitionViewOrWait(id: ResultPartitionID, request: PendingViewRequest): Boolean = {
    val p = partitions.get(id)
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
      val now = partitions.get(id)
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

  def getPartition(id: ResultPartitionID): Option[ResultPartition] = Option(partitions.get(id))

  def releasePartition(id: ResultPartitionID, cause: Throwable): Unit = {
    val p = partitions.remove(id)
    if (p != null) p.release(cause)
  }

  /** Removes a partition that released itself (a fully consumed pipelined one). */
  def unregister(partition: ResultPartition): Unit = partitions.remove(partition.partitionId, partition)

  /** Releases every partition of a shuffle (Spark's unregisterShuffle); returns how many. */
  def releasePartitionsOfShuffle(shuffleId: Int): Int = {
    val ids = partitions.keySet().asScala.filter(_.shuffleId == shuffleId).toList
    ids.foreach(releasePartition(_, null))
    pending.keySet().asScala.filter(_.shuffleId == shuffleId).foreach(pending.remove)
    ids.size
  }

  def partitionIds: Set[ResultPartitionID] = partitions.keySet().asScala.toSet

  /** The registered partitions now. */
  def registeredPartitions: Seq[ResultPartition] = partitions.values().asScala.toSeq

  def numPartitions: Int = partitions.size

  def shutdown(): Unit = {
    shutDown = true
    partitions.keySet().asScala.toList.foreach(releasePartition(_, null))
    fileReaders.clear()
  }
}

/** A reader waiting for a partition that is not registered yet. */
trait PendingViewRequest {

  /** Called once, on the registering thread, with the partition it waited for. */
  def serve(partition: ResultPartition): Unit
}
