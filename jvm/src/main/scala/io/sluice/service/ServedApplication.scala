package io.sluice.service

import java.io.File

import io.sluice.netty.{PartitionSource, RequestedSubpartitions, TransportProtocolException}
import io.sluice.partition.{ExecutorLayouts, PartitionNotFoundException, PartitionedFileLayout, ResultPartitionManager}

/**
 * One application as a node shuffle service holds it: the key its readers authenticate with
 * (spark.authenticate), the dirs its executors on this node registered (([[ExecutorLayouts]])), and a
 * [[ResultPartitionManager]] over the map outputs found there, which the server's readers read
 * exactly as an executor's server reads its own (Spark's external shuffle service keeps an
 * `ExecutorShuffleInfo` per executor the same way). Its files go with [[removeShuffle]] and
 * [[remove]]. Thread-safe: lookups on the event loops, removals and disk sizes on the service's
 * housekeeping thread.
 *
 * @param key the application's node-service key ([[ApplicationKey]]), None without spark.authenticate
 */
private[service] final class ServedApplication(
    val appId: String,
    val key: Option[String],
    caches: ResultPartitionManager.Caches,
    maxOpenFiles: Int) {

  val layout = new ExecutorLayouts
  val partitions = new ResultPartitionManager(maxOpenFiles, Some(layout), sharedCaches = Some(caches))

  /** When the application last spoke (System.nanoTime): a registration, a heartbeat, a connection. */
  @volatile var lastHeard: Long = System.nanoTime()
  @volatile private var removed = false

  def touch(): Unit = lastHeard = System.nanoTime()

  def isRemoved: Boolean = removed

  /** What a connection of this application reads. */
  val source: PartitionSource = new PartitionSource {
    override def partitions: ResultPartitionManager = ServedApplication.this.partitions

    override def prepare(producerExecutor: Option[String], inputs: IndexedSeq[RequestedSubpartitions]): Unit = {
      val executor = producerExecutor.getOrElse(throw new TransportProtocolException(
          "a request reached a node shuffle service without naming the executor that wrote its map outputs"))
      val code = layout.codeOf(executor)
      var i = 0
      while (i < inputs.size) {
        val id = inputs(i).partitionId
        if (code < 0) {
          throw new PartitionNotFoundException(id, i,
            new IllegalStateException(s"executor $executor of application $appId never registered with this node " +
              "shuffle service"))
        }
        try partitions.registerFinishedFile(id, code)
        catch { case _: PartitionNotFoundException => throw new PartitionNotFoundException(id, i) }
        i += 1
      }
    }
  }

  /** Deletes every file of shuffle `shuffleId` in every registered dir; how many files went. */
  def removeShuffle(shuffleId: Int): Int = {
    partitions.releasePartitionsOfShuffle(shuffleId)
    val prefix = PartitionedFileLayout.shufflePrefix(shuffleId)
    var n = 0
    for ((_, dirs) <- layout.executors; dir <- dirs) {
      val files = dir.listFiles((_: File, name: String) => name.startsWith(prefix))
      if (files != null) files.foreach(f => if (f.delete()) n += 1)
    }
    n
  }

  /** Releases everything and deletes the registered dirs with what is left in them. Idempotent. */
  def remove(): Unit = synchronized {
    if (!removed) {
      removed = true
      try partitions.shutdown()
      finally for ((_, dirs) <- layout.executors; dir <- dirs) ServedApplication.deleteRecursively(dir)
    }
  }

  /** Files and bytes in the registered dirs now (walks them). */
  def diskUsage: (Int, Long) = {
    var files = 0
    var bytes = 0L
    for ((_, dirs) <- layout.executors; dir <- dirs) {
      val all = dir.listFiles()
      if (all != null) all.foreach { f => if (f.isFile) { files += 1; bytes += f.length() } }
    }
    (files, bytes)
  }
}

private[service] object ServedApplication {

  /** Deletes `dir` and everything under it, following no symbolic link. */
  def deleteRecursively(dir: File): Unit = {
    val path = dir.toPath
    if (!java.nio.file.Files.exists(path, java.nio.file.LinkOption.NOFOLLOW_LINKS)) return
    if (java.nio.file.Files.isDirectory(path, java.nio.file.LinkOption.NOFOLLOW_LINKS)) {
      val children = dir.listFiles()
      if (children != null) children.foreach(deleteRecursively)
    }
    java.nio.file.Files.deleteIfExists(path)
  }
}
