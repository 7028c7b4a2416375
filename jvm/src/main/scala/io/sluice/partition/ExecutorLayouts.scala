package io.sluice.partition

import java.io.File

/**
 * Where one application's map outputs written by several executors of one host lie: the dirs of
 * each executor, in registration order; a partition's code is its executor's number, and its file
 * is where that executor's [[PartitionedFileLayout]] put it. A node shuffle service keeps the dirs
 * its executors registered this way (as Spark's external shuffle service does), and an executor
 * the dirs of the other executors on its host whose outputs it reads from disk
 * ([[io.sluice.partition.consumer.HostLocalPartitions]]). No counterpart in Flink. Executors are
 * only ever added. Thread-safe: registration is synchronized, lookups read an immutable snapshot.
 */
final class ExecutorLayouts extends PartitionFileLocator {

  @volatile private var layouts = Vector.empty[(String, PartitionedFileLayout)]

  /**
   * Registers executor `executorId`'s dirs; its number. Registering an executor again with the
   * same dirs is harmless; with other dirs it is refused (Left, naming both).
   */
  def register(executorId: String, dirs: IndexedSeq[File]): Either[String, Int] = synchronized {
    val i = layouts.indexWhere(_._1 == executorId)
    if (i < 0) {
      layouts = layouts :+ (executorId -> new PartitionedFileLayout(dirs))
      Right(layouts.size - 1)
    } else if (layouts(i)._2.localDirs == dirs) Right(i)
    else Left(s"executor $executorId registered ${layouts(i)._2.localDirs.mkString(", ")} before, now ${dirs.mkString(", ")}")
  }

  /** The number of executor `executorId`, or -1 when it did not register. */
  def codeOf(executorId: String): Int = layouts.indexWhere(_._1 == executorId)

  /** Every registered executor and its dirs. */
  def executors: Seq[(String, IndexedSeq[File])] = layouts.map { case (e, l) => e -> l.localDirs }

  override def file(id: ResultPartitionID, code: Int): File = layouts(code)._2.writtenFile(id)

  override def code(id: ResultPartitionID, path: File): Int = -1 // registered with their code, never by path
}
