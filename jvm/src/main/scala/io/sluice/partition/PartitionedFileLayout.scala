package io.sluice.partition

import java.io.File

/**
 * Where the files of blocking result partitions live in the executor's local dirs, derived from
 * the partition's id, as Spark's DiskBlockManager hashes a block's file name into its local dirs:
 * a finished partition needs no path in the heap, only a small [[code]] (0 for the file its
 * producer wrote, n + 1 for the n-th file received from another executor). Stateless; thread-safe.
 */
final class PartitionedFileLayout(val localDirs: IndexedSeq[File]) extends PartitionFileLocator {
  require(localDirs.nonEmpty, "Sluice needs at least one local dir for blocking partitions")

  private def dirOf(id: ResultPartitionID, n: Int): File = localDirs(Math.floorMod(id.hashCode + n, localDirs.size))

  private def prefix(id: ResultPartitionID): String = PartitionedFileLayout.shufflePrefix(id.shuffleId) + id.producerId

  /** The file the producer of `id` writes. */
  def writtenFile(id: ResultPartitionID): File = new File(dirOf(id, 0), s"${prefix(id)}.part")

  /** The `n`-th file received for `id` from another executor (decommissioning); `n` in [0, 2^30). */
  def migratedFile(id: ResultPartitionID, n: Int): File = {
    require(n >= 0 && n <= PartitionedFileLayout.MaxMigrated, s"migrated file number $n")
    new File(dirOf(id, n), s"${prefix(id)}.migrated-$n.part")
  }

  /** The file of `id` that `code` names (see [[code]]). */
  override def file(id: ResultPartitionID, code: Int): File = if (code == 0) writtenFile(id) else migratedFile(id, code - 1)

  /** The code by which [[file]] finds `path` again, or -1 when `path` is not one of `id`'s files here. */
  override def code(id: ResultPartitionID, path: File): Int = {
    val name = path.getName
    val migrated = s"${prefix(id)}.migrated-"
    val c =
      if (name == s"${prefix(id)}.part") 0
      else if (name.startsWith(migrated) && name.endsWith(".part")) {
        name.substring(migrated.length, name.length - ".part".length).toIntOption
          .filter(n => n >= 0 && n <= PartitionedFileLayout.MaxMigrated).fold(-1)(_ + 1)
      } else -1
    if (c >= 0 && file(id, c) == path) c else -1
  }
}

object PartitionedFileLayout {

  /** How every file of shuffle `shuffleId` (data and index, written or migrated) begins its name. */
  def shufflePrefix(shuffleId: Int): String = s"sluice-shuffle-$shuffleId-"

  /** The largest number of a migrated file (numbers wrap around below it). */
  val MaxMigrated: Int = (1 << 30) - 1
}
