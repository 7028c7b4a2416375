package io.sluice.partition

import java.io.File

/**
 * Finds the file of a finished blocking partition from its id and a small code, so the
 * [[ResultPartitionManager]] keeps no path per map output: an executor's [[PartitionedFileLayout]]
 * (its own local dirs), or a node shuffle service's view of every registered executor's dirs.
 * Implementations are immutable or thread-safe.
 */
trait PartitionFileLocator {

  /** The data file of `id` that `code` names. */
  def file(id: ResultPartitionID, code: Int): File

  /** The code by which [[file]] finds `path` again, or -1 when `path` is not one of `id`'s files here. */
  def code(id: ResultPartitionID, path: File): Int
}
