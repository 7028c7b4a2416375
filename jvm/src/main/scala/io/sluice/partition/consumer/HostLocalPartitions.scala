package io.sluice.partition.consumer

import java.io.{File, IOException}

import io.sluice.partition.{ExecutorLayouts, PartitionNotFoundException, ResultPartitionID, ResultPartitionManager}

/**
 * The finished map outputs of other executors on this host that this executor's gates read
 * straight from their files, as Spark's readers do with spark.shuffle.readHostLocalDisk (no
 * counterpart in Flink, whose LocalInputChannel stops at its TaskManager): the dirs each such
 * executor writes its blocking partitions into, as the driver names them ([[addExecutor]]), and a
 * read-only [[ResultPartitionManager]] of the partitions read so far, over the executor's own file
 * and index caches, which [[LocalInputChannel]]s read like the executor's own partitions. It never
 * deletes a file: releasing a shuffle here only forgets its partitions. Thread-safe.
 *
 * @param caches     the executor's own partition manager's file and index caches
 * @param onThisHost whether a producer's outputs are served on this host (its own server's or
 *                   node service's address is this host's)
 */
final class HostLocalPartitions(caches: ResultPartitionManager.Caches,
    onThisHost: ProducerLocation => Boolean = _ => false) {

  private val layouts = new ExecutorLayouts
  private val asked = java.util.concurrent.ConcurrentHashMap.newKeySet[String]()
  @volatile private var refresh: () => Unit = () => ()

  /** The partitions read from other executors' files; a lost file fails its reader as a lost producer would. */
  val partitionManager = new ResultPartitionManager(layout = Some(layouts), sharedCaches = Some(caches),
    ownsFiles = false)

  /** Executor `executorId` of this host writes its blocking partitions into `dirs` (known ones are left as they are). */
  def addExecutor(executorId: String, dirs: Seq[File]): Unit =
    if (dirs.nonEmpty && layouts.codeOf(executorId) < 0) layouts.register(executorId, dirs.toIndexedSeq)

  /** Whether the dirs of executor `executorId` are known here. */
  def knows(executorId: String): Boolean = layouts.codeOf(executorId) >= 0

  /**
   * How to learn the dirs of this host's executors now, waiting (bounded) for the answer: the
   * Spark layer asks the driver.
   */
  def setRefresh(r: () => Unit): Unit = refresh = r

  /**
   * Whether the dirs of `p`'s executor are known here, after asking for them once (on the calling
   * task thread, see [[setRefresh]]) when `p`'s outputs are served on this host and its executor
   * is new: a producer that started after this executor's last report is read from disk too.
   */
  def knowsOrLearns(p: ProducerLocation): Boolean =
    knows(p.executorId) || (onThisHost(p) && asked.add(p.executorId) && { refresh(); knows(p.executorId) })

  /**
   * Whether the finished partition `id` of executor `executorId` can be read from its file here:
   * registered (once, from its index file's header) when its file is where the executor's dirs put
   * it. False when the executor's dirs are unknown, or its file is not there or unusable (a map
   * output moved to it from another executor, or deleted): then it is read from its server, which
   * reports what is wrong. A map output registered here under another executor (it moved since)
   * is forgotten first.
   */
  def register(id: ResultPartitionID, executorId: String): Boolean = {
    val code = layouts.codeOf(executorId)
    code >= 0 && {
      val known = partitionManager.finishedCode(id)
      if (known >= 0 && known != code) partitionManager.releasePartition(id, null)
      try { partitionManager.registerFinishedFile(id, code); true }
      catch { case _: PartitionNotFoundException | _: IOException => false }
    }
  }

  /** Forgets the partitions of shuffle `shuffleId` (Spark removed it); their files stay. */
  def releaseShuffle(shuffleId: Int): Unit = partitionManager.releasePartitionsOfShuffle(shuffleId)

  /** Forgets every partition (the executor's environment stops); their files stay. */
  def shutdown(): Unit = partitionManager.shutdown(keepFinishedFiles = true)
}
