package io.sluice.partition

/**
 * One reader's cursor over the subpartitions of several finished (blocking) result partitions of
 * this executor: the map outputs one reduce task reads from here, as one stream (Flink's
 * UnionResultSubpartitionView, FLINK-33743, which spans one producer's subpartitions; this spans
 * every producer of the executor). Inputs are read one after another, each in its file's order,
 * and each ends with its own end of partition, tagged with its input index ([[lastInput]]).
 *
 * Every input's view is opened at once (a view only opens its file with its first buffer), so a
 * missing partition fails the whole request before anything is sent. Used by one thread at a
 * time (the event loop of a remote reader, the task thread of a local one); [[releaseAllResources]]
 * may come from another.
 */
final class UnionResultSubpartitionView private (
    views: IndexedSeq[ResultSubpartitionView],
    partitionIds: IndexedSeq[ResultPartitionID]) {

  private var current = 0
  private var remaining: Long = {
    var n = 0L
    var i = 0
    while (i < views.size) { n += views(i).backlog; i += 1 }
    n
  }
  private var last = -1
  @volatile private var released = false

  /**
   * The next buffer (spilled) or end of the current input, or null when nothing is left (or the
   * views were released). Throws ProducerFailedException when a partition was released under it.
   */
  def getNextBuffer(): BufferAndBacklog = {
    if (released || current >= views.size) return null
    val v = views(current)
    val next = v.getNextBuffer()
    if (next == null) {
      if (v.isReleased) throw new ProducerFailedException(partitionIds(current), v.failureCause)
      return null
    }
    last = current
    if (next.isEndOfPartition) current += 1 else remaining -= 1
    next
  }

  /** The input (index into the requested inputs) of the buffer or end [[getNextBuffer]] returned last. */
  def lastInput: Int = last

  /** The input being read now (its end not handed out yet), or the number of inputs once finished. */
  def currentInput: Int = current

  /** Every input's end was handed out. */
  def isFinished: Boolean = current >= views.size

  /** Stored buffers not handed out yet, over every input. */
  def backlog: Int = math.min(remaining, Int.MaxValue.toLong).toInt

  def isReleased: Boolean = released

  def releaseAllResources(): Unit = if (!released) {
    released = true
    views.foreach(v => if (!v.isReleased) v.releaseAllResources())
  }
}

object UnionResultSubpartitionView {

  /**
   * Opens a view on each of `inputs` ((partition, subpartition start, end), each a finished
   * blocking partition registered in `manager`). Throws PartitionNotFoundException for the first
   * missing one (naming its position in `inputs`), IllegalArgumentException for a pipelined one, after releasing what it opened.
   * `sharedFiles`: the views read through the manager's kept file handles (only for the server's
   * event loops, never a task thread, which an interrupt could make close a shared handle).
   */
  def open(manager: ResultPartitionManager, inputs: IndexedSeq[(ResultPartitionID, Int, Int)],
      listener: BufferAvailabilityListener, sharedFiles: Boolean): UnionResultSubpartitionView = {
    val readers = if (sharedFiles) Some(manager.fileReaders) else None
    val opened = new scala.collection.mutable.ArrayBuffer[ResultSubpartitionView](inputs.size)
    try {
      inputs.iterator.zipWithIndex.foreach { case ((id, start, end), i) =>
        val p = manager.getPartition(id).getOrElse(throw new PartitionNotFoundException(id, i))
        if (p.partitionType != ResultPartitionType.Blocking) {
          throw new IllegalArgumentException(s"Result partition ($id) is pipelined: its subpartitions are requested one " +
            "channel each, not together with others")
        }
        opened += (p match {
          case s: SortMergeResultPartition => s.createSubpartitionView(start, end, listener, readers)
          case other => other.createSubpartitionView(start, end, listener)
        })
      }
    } catch {
      case e: Throwable =>
        opened.foreach(v =>
          try v.releaseAllResources()
          catch { case s: Throwable => e.addSuppressed(s) })
        throw e
    }
    new UnionResultSubpartitionView(opened.toIndexedSeq, inputs.map(_._1))
  }
}
