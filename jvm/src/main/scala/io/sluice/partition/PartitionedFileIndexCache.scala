package io.sluice.partition

import java.io.File

/**
 * The index files of finished partition files an executor keeps in its heap, up to `capacityBytes`
 * (spark.sluice.network.indexCacheSize): Spark's external shuffle service keeps its index cache
 * the same way (spark.shuffle.service.index.cache.size). Every reduce task reads its range of
 * every map output's index once, so without it each index file is opened and read once per
 * reader; with it, once per executor (the writer leaves the bytes it just wrote here).
 *
 * When full, an entry no reader asked for during the last [[PartitionedFileIndexCache.IdleMs]]
 * makes room, least recently used first; an entry read more recently is never dropped for a new
 * one, which is then not kept: a stage's reducers scan the map outputs in the same order, and a
 * least-recently-used cache smaller than the scan would drop each index just before its next
 * reader. An index larger than an eighth of the capacity is never kept. A deleted file's index
 * goes at once ([[remove]]). Thread-safe; the lock covers map updates only, never a system call.
 */
final class PartitionedFileIndexCache(val capacityBytes: Long) {
  require(capacityBytes >= 0, s"an index cache of $capacityBytes bytes")
  import PartitionedFileIndexCache.{Key, Kept}

  private val kept = new java.util.LinkedHashMap[Key, Kept](16, 0.75f, true)
  private var bytes = 0L // guarded by this
  private var hits = 0L
  private var misses = 0L

  /** The index file's bytes of the data file [[PartitionedFileIndexCache.key]] names, if kept. */
  def get(path: Key): Array[Byte] = synchronized {
    val k = kept.get(path)
    if (k == null) { misses += 1; null }
    else { hits += 1; k.lastUsed = System.nanoTime(); k.bytes }
  }

  /** Keeps `index`, the whole index file of the data file `path` names, if it fits; whether it did. */
  def put(path: Key, index: Array[Byte]): Boolean = {
    val n = index.length.toLong
    if (!admits(n)) return false
    val now = System.nanoTime()
    synchronized {
      val old = kept.remove(path)
      if (old != null) bytes -= old.bytes.length
      if (bytes + n > capacityBytes) {
        val it = kept.values().iterator()
        while (bytes + n > capacityBytes && it.hasNext) {
          val k = it.next()
          if (now - k.lastUsed < PartitionedFileIndexCache.IdleMs * 1000000L) return false // access order: all later ones too
          bytes -= k.bytes.length
          it.remove()
        }
        if (bytes + n > capacityBytes) return false
      }
      kept.put(path, new Kept(index, now))
      bytes += n
      true
    }
  }

  /** Whether an index file of `length` bytes may be kept at all (at most an eighth of the capacity). */
  def admits(length: Long): Boolean = length <= capacityBytes / 8

  /** Drops the index of the data file `path` names (the file was deleted). */
  def remove(path: Key): Unit = synchronized {
    val k = kept.remove(path)
    if (k != null) bytes -= k.bytes.length
  }

  /** Bytes kept now. */
  def size: Long = synchronized(bytes)

  /** Index files kept now. */
  def numEntries: Int = synchronized(kept.size)

  /** Reads answered from the heap, and reads that had to go to the index file, so far. */
  def counts: (Long, Long) = synchronized((hits, misses))

  /** Drops every index (the executor stops). */
  def clear(): Unit = synchronized { kept.clear(); bytes = 0L }
}

object PartitionedFileIndexCache {

  /** How long an index read by a reader is safe from being dropped for a new one. */
  val IdleMs = 1000L

  /** The key of the data file at `path`. */
  def key(path: File): Key = new Key(path.getPath)

  /**
   * A data file's path with a well-spread hash: the paths of a shuffle's files differ only in the
   * producer's number, which String's hash spreads poorly (long collision chains in the map).
   */
  final class Key private[PartitionedFileIndexCache] (val path: String) {
    override val hashCode: Int = scala.util.hashing.MurmurHash3.stringHash(path)
    override def equals(o: Any): Boolean = o match {
      case k: Key => (k eq this) || (k.hashCode == hashCode && k.path == path)
      case _ => false
    }
    override def toString: String = path
  }

  private final class Kept(val bytes: Array[Byte], var lastUsed: Long)
}
