package io.sluice.partition

import io.sluice.memory.{LocalBufferPool, NetworkBuffer}

/**
 * Where a [[SortMergeResultPartition]] collects its frames between spills (Flink's DataBuffer):
 * network buffers of the partition's pool, written to the partition's file grouped by subpartition
 * (one region per spill) when no more fit. Two layouts, as in Flink's sort-merge shuffle:
 *
 *  - [[HashBasedDataBuffer]]: a chain of buffers per subpartition, each frame copied once into its
 *    subpartition's buffer and each buffer written to the file as it is. Every subpartition being
 *    written holds a partly filled buffer, so it needs a pool of a few buffers per subpartition.
 *  - [[SortBasedDataBuffer]]: all subpartitions' frames in arrival order in shared buffers,
 *    gathered subpartition by subpartition into segment-sized buffers when spilled. Its memory and
 *    the buffers it writes do not depend on the number of subpartitions.
 *
 * Producer thread only ([[numBuffers]] may be read by metrics from any thread).
 */
abstract class DataBuffer(pool: LocalBufferPool) {

  protected final val segmentSize: Int = pool.segmentSize

  /** The network buffers held, in the order they were added, and their memory addresses. */
  protected final var buffers = new Array[NetworkBuffer](16)
  protected final var addresses = new Array[Long](16)
  @volatile protected final var held = 0

  /** Whether no frame was appended since the last spill. */
  def isEmpty: Boolean

  /** Network buffers held (written or not). */
  final def numBuffers: Int = held

  /**
   * Appends one frame to `subpartition`: `header` (big-endian, as readers parse it) and `length`
   * bytes at (base, offset). Grows by buffers the pool gives without waiting; returns false, with
   * nothing written, when the frame does not fit.
   */
  def append(subpartition: Int, header: Int, base: AnyRef, offset: Long, length: Int): Boolean

  /**
   * Writes every subpartition's frames, subpartition after subpartition and in arrival order
   * within each, to `file` as buffers of at most one segment, then empties the data buffer (it
   * keeps its network buffers). Returns the number of buffers written.
   */
  def spillTo(file: PartitionedFile): Int

  /** Adds `buffer` (the producer waited for it, or [[grow]] got it) to the data buffer's memory. */
  def addBuffer(buffer: NetworkBuffer): Unit = {
    if (held == buffers.length) resize(held * 2)
    buffers(held) = buffer
    addresses(held) = buffer.memoryAddress()
    held += 1
  }

  /** Makes room for `n` buffers in the per-buffer arrays (a subclass resizes its own, too). */
  protected def resize(n: Int): Unit = {
    buffers = java.util.Arrays.copyOf(buffers, n)
    addresses = java.util.Arrays.copyOf(addresses, n)
  }

  /** Whether one more buffer may be held, whatever the pool would give. */
  protected def mayGrow: Boolean = true

  /** Adds a buffer the pool gives without waiting; false when it gives none. */
  protected final def grow(): Boolean = mayGrow && {
    val b = pool.requestBuffer()
    if (b == null) false else { addBuffer(b); true }
  }

  /** Gives back the buffers beyond the first `n` (the pool was made smaller); only when empty. */
  def trimTo(n: Int): Unit = {
    require(isEmpty, "only an empty data buffer gives buffers back")
    while (held > math.max(0, n)) {
      held -= 1
      val b = buffers(held)
      buffers(held) = null
      b.release()
    }
  }

  /** Gives every buffer back to the pool and forgets what was appended (done, or failed). */
  def release(): Unit
}

object DataBuffer {

  /**
   * Network buffers per subpartition from which a partition collects its frames hash-based: at
   * two, at most half of the pool is partly filled buffers, one per subpartition (three quarters
   * of the memory holds data on average). Below it the frames share buffers, sort-based.
   */
  val HashBasedMinBuffersPerSubpartition = 2

  /** Whether a pool of `poolSize` buffers collects the frames of `numSubpartitions` hash-based. */
  def hashBased(numSubpartitions: Int, poolSize: Int): Boolean =
    numSubpartitions.toLong * HashBasedMinBuffersPerSubpartition <= poolSize

  /** An empty data buffer of `numSubpartitions` over `pool`, in the layout asked for. */
  def create(pool: LocalBufferPool, numSubpartitions: Int, hashBased: Boolean): DataBuffer =
    if (hashBased) new HashBasedDataBuffer(pool, numSubpartitions) else new SortBasedDataBuffer(pool, numSubpartitions)
}
