package io.sluice.partition

import java.nio.ByteBuffer

/**
 * Spark's decommissioning fallback storage as the engine reads it
 * (`spark.storage.decommission.fallbackStorage.path`, any Hadoop file system): where a
 * decommissioned executor's finished map outputs went when no peer executor took them, each as
 * a copy of its partition file and its index (behind the envelope that names the partition,
 * [[PartitionedFileIndex.encode]]). The Spark layer implements it over Hadoop's FileSystem; the
 * engine only opens the files of a partition and reads them with [[FallbackPartitionReader]].
 * Thread-safe: every reader opens its own handles.
 */
trait FallbackStorage {

  /** The copied partition file of `id`; an IOException naming its path when it cannot be opened. */
  def openData(id: ResultPartitionID): StoredFile

  /** The copied index of `id` (envelope and index file); an IOException naming its path when it cannot be opened. */
  def openIndex(id: ResultPartitionID): StoredFile
}

/**
 * One open, read-only file of a [[FallbackStorage]], read with positioned reads (Hadoop's
 * PositionedReadable, Flink's FSDataInputStream), so reads never share a position. One reader's
 * handle, used by one thread at a time and closed by it.
 */
trait StoredFile extends java.io.Closeable {

  /** Bytes of the file, as its file system gave them when it was opened. */
  def length: Long

  /**
   * Reads `target.remaining()` bytes at `position` into `target`, advancing its position; an
   * IOException naming the file when it ends before, or the read fails.
   */
  def readFully(position: Long, target: ByteBuffer): Unit
}
