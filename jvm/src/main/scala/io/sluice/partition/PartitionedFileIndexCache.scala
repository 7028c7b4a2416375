package io.sluice.partition

import java.io.File
import java.util.concurrent.atomic.{AtomicLong, LongAdder}

/**
 * The index files of finished partition files an executor keeps in its heap, up to `capacityBytes`
 * (spark.sluice.network.indexCacheSize): Spark's external shuffle service keeps its index cache
 * the same way (spark.shuffle.service.index.cache.size). The writer leaves the index it just wrote
 * here ([[put]]); a reader that misses loads a whole index only when the cache has reserved room for
 * it first ([[reserve]]), and otherwise reads its own range of the index file.
 *
 * When full, an entry makes room for a new one only when no reader asked for it during the last
 * [[PartitionedFileIndexCache.IdleMs]] (least recently used first) and, if a reader loaded it, once
 * readers have taken at least its length in ranges from it (or asked nothing of it for
 * [[PartitionedFileIndexCache.UnpaidIdleMs]]): a stage's reducers scan the map outputs in the same
 * order, and an index dropped before it paid for its load would be read once whole and then again
 * range by range. An index larger than an eighth of the capacity is never kept. A deleted file's
 * index goes at once ([[remove]]). [[indexBytesRead]] against [[indexBytesNeeded]] shows what readers
 * read of index files for what they asked. Thread-safe; the lock covers map updates only, never a
 * system call.
 */
final class PartitionedFileIndexCache(val capacityBytes: Long) {
  require(capacityBytes >= 0, s"an index cache of $capacityBytes bytes")
  import PartitionedFileIndexCache.{IdleNanos, Key, Kept, Reservation, UnpaidIdleNanos}

  private val kept = new java.util.LinkedHashMap[Key, Kept](16, 0.75f, true)
  private var bytes = 0L // guarded by this, reserved entries included
  private var hits = 0L
  private var misses = 0L
  private val read = new LongAdder
  private val needed = new LongAdder

  /** The index of the data file [[PartitionedFileIndexCache.key]] names, if kept (not while it is being loaded). */
  def get(path: Key): Kept = synchronized {
    val k = kept.get(path)
    if (k == null || k.bytes == null) { misses += 1; null }
    else { hits += 1; k.lastUsed = System.nanoTime(); k }
  }

  /**
   * Keeps `index`, the whole index file of the data file `path` names, which its writer holds
   * anyway (nothing was read for it), if there is room; whether it did.
   */
  def put(path: Key, index: Array[Byte]): Boolean = {
    val n = index.length.toLong
    if (!admits(n)) return false
    val now = System.nanoTime()
    synchronized {
      val old = kept.remove(path)
      if (old != null) bytes -= old.length
      if (!makeRoom(n, now)) return false
      kept.put(path, new Kept(index, index.length, now, paid = true))
      bytes += n
      true
    }
  }

  /**
   * Room for the index file of `length` bytes of the data file `path` names, to be loaded by the
   * caller and handed over with [[Reservation.fill]] (or [[Reservation.cancel]]); null when the
   * cache would not keep it (too large, no room without dropping what it must not drop, or kept or
   * being loaded already): the caller then reads only the range it needs.
   */
  def reserve(path: Key, length: Int): Reservation = {
    if (!admits(length.toLong)) return null
    val now = System.nanoTime()
    synchronized {
      if (kept.containsKey(path) || !makeRoom(length.toLong, now)) return null
      val k = new Kept(null, length, now, paid = false)
      kept.put(path, k)
      bytes += length
      new Reservation(this, path, k)
    }
  }

  /** Drops entries that may go, least recently used first, until `n` more bytes fit; whether they do. */
  private def makeRoom(n: Long, now: Long): Boolean = {
    if (bytes + n <= capacityBytes) return true
    var freed = 0L
    val victims = new java.util.ArrayList[Key]()
    val it = kept.entrySet().iterator()
    while (bytes - freed + n > capacityBytes && it.hasNext) {
      val e = it.next()
      val k = e.getValue
      val idle = now - k.lastUsed
      if (idle < IdleNanos) return false // access order: every later entry was read more recently
      if (k.bytes != null && (k.paidBack || idle >= UnpaidIdleNanos)) { victims.add(e.getKey); freed += k.length }
    }
    if (bytes - freed + n > capacityBytes) return false
    victims.forEach(v => { kept.remove(v); () })
    bytes -= freed
    true
  }

  private[partition] def fill(r: Reservation, index: Array[Byte]): Unit = synchronized {
    if (kept.get(r.path) eq r.entry) { r.entry.bytes = index; r.entry.lastUsed = System.nanoTime() }
  }

  private[partition] def cancel(r: Reservation): Unit = synchronized {
    if (kept.get(r.path) eq r.entry) { kept.remove(r.path); bytes -= r.entry.length }
  }

  /** Whether an index file of `length` bytes may be kept at all (at most an eighth of the capacity). */
  def admits(length: Long): Boolean = length <= capacityBytes / 8

  /** Drops the index of the data file `path` names (the file was deleted), kept or being loaded. */
  def remove(path: Key): Unit = synchronized {
    val k = kept.remove(path)
    if (k != null) bytes -= k.length
  }

  /** Counts `n` bytes a reader read from an index file (a whole index, a range or a directory's entries). */
  private[partition] def countRead(n: Long): Unit = read.add(n)

  /** Counts `n` bytes of index a reader asked for: the range's directory and entries, wherever they came from. */
  private[partition] def countNeeded(n: Long): Unit = needed.add(n)

  /** Bytes readers read from index files so far. */
  def indexBytesRead: Long = read.sum()

  /** Bytes of index readers asked for so far (what reading only their ranges would read). */
  def indexBytesNeeded: Long = needed.sum()

  /** Bytes kept now (indexes being loaded included). */
  def size: Long = synchronized(bytes)

  /** Index files kept now (or being loaded). */
  def numEntries: Int = synchronized(kept.size)

  /** Reads answered from the heap, and reads that had to go to the index file, so far. */
  def counts: (Long, Long) = synchronized((hits, misses))

  /** Drops every index (the executor stops). */
  def clear(): Unit = synchronized { kept.clear(); bytes = 0L }
}

object PartitionedFileIndexCache {

  /** How long an index read by a reader is safe from being dropped for a new one. */
  val IdleMs = 1000L

  /** How long an index a reader loaded, and readers have not yet taken its length from, is safe. */
  val UnpaidIdleMs = 60000L

  private val IdleNanos = IdleMs * 1000000L
  private val UnpaidIdleNanos = UnpaidIdleMs * 1000000L

  /** The key of the data file at `path`. */
  def key(path: File): Key = new Key(path.getPath)

  /**
   * A data file's path with a well-spread hash: the paths of a shuffle's files differ only in the
   * producer's number, which String's hash spreads poorly (long collision chains in the map).
   */
  final class Key private[partition] (val path: String) {
    override val hashCode: Int = scala.util.hashing.MurmurHash3.stringHash(path)
    override def equals(o: Any): Boolean = o match {
      case k: Key => (k eq this) || (k.hashCode == hashCode && k.path == path)
      case _ => false
    }
    override def toString: String = path
  }

  /**
   * One kept index: its bytes (null while a reader loads it), and how many bytes of ranges readers
   * took from it (`paid`: its writer left it, nothing was read for it).
   */
  final class Kept private[partition] (@volatile private[partition] var bytes: Array[Byte],
      private[partition] val length: Int, @volatile private[partition] var lastUsed: Long,
      paid: Boolean) {
    private val served = new AtomicLong(if (paid) length.toLong else 0L)

    /** A reader took `n` bytes of ranges from this index. */
    private[partition] def serve(n: Long): Unit = served.addAndGet(n)

    private[partition] def paidBack: Boolean = served.get >= length
  }

  /** Room reserved for one index file while its reader loads it. */
  final class Reservation private[partition] (cache: PartitionedFileIndexCache,
      private[partition] val path: Key, private[partition] val entry: Kept) {

    /** Hands over the loaded index: kept, unless its file was deleted (or the cache cleared) meanwhile. */
    def fill(index: Array[Byte]): Unit = cache.fill(this, index)

    /** Gives the room back (the load failed). */
    def cancel(): Unit = cache.cancel(this)
  }
}
