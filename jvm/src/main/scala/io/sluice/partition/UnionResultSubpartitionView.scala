package io.sluice.partition

/**
 * One reader's cursor over the subpartitions of several finished (blocking) result partitions of
 * this executor: the map outputs one reduce task reads from here, as one stream (Flink's
 * UnionResultSubpartitionView, FLINK-33743, which spans one producer's subpartitions; this spans
 * every producer of the executor). Inputs are read one after another, each in its file's order,
 * and each ends with its own end of partition, tagged with its input index ([[lastInput]]).
 *
 * [[UnionResultSubpartitionView.open]] checks every input up front, so a missing one fails the
 * whole request before anything is sent, but the view holds one input's view at a time: opened
 * when the cursor reaches it, released when it hands out its end. The inputs are kept in primitive
 * arrays (20 bytes each). Used by one thread at a time (a read thread of the server for a remote
 * reader, the task thread of a local one); [[releaseAllResources]] may come from another.
 */
final class UnionResultSubpartitionView private (
    manager: ResultPartitionManager,
    shuffleIds: Array[Int],
    producerIds: Array[Long],
    starts: Array[Int],
    ends: Array[Int],
    listener: BufferAvailabilityListener,
    readers: Option[PartitionedFileReaderCache]) {

  private val numInputs = shuffleIds.length
  private var current = 0
  private var last = -1

  /** The view of input `current`, once the cursor reached it; null between inputs. */
  @volatile private var view: ResultSubpartitionView = _
  @volatile private var released = false

  private def partitionId(i: Int): ResultPartitionID = ResultPartitionID(shuffleIds(i), producerIds(i))

  /**
   * The next buffer (spilled) or end of the current input, or null when nothing is left (or the
   * views were released). Throws ProducerFailedException when a partition was released under it.
   */
  def getNextBuffer(): BufferAndBacklog = {
    if (released || current >= numInputs) return null
    val v = openCurrent()
    if (v == null) return null
    val next = v.getNextBuffer()
    if (next == null) {
      if (v.isReleased) throw new ProducerFailedException(partitionId(current), v.failureCause, current)
      return null
    }
    last = current
    if (next.isEndOfPartition) {
      view = null
      v.releaseAllResources()
      current += 1
    }
    next
  }

  /** The current input's view, opened now if the cursor just reached it; null once released. */
  private def openCurrent(): ResultSubpartitionView = {
    val open = view
    if (open != null) return open
    val id = partitionId(current)
    val v =
      try manager.getPartition(id) match {
          case Some(s: SortMergeResultPartition) => s.createSubpartitionView(starts(current), ends(current), listener, readers)
          case Some(other) => other.createSubpartitionView(starts(current), ends(current), listener)
          case None => throw new ProducerFailedException(id, null, current) // checked at open: released since
        }
      catch {
        case e: ProducerFailedException if e.input < 0 => throw new ProducerFailedException(id, e.getCause, current)
      }
    view = v
    // Released meanwhile: one of the two threads sees the other's write and releases the view.
    if (released) { view = null; v.releaseAllResources(); null }
    else v
  }

  /** The input (index into the requested inputs) of the buffer or end [[getNextBuffer]] returned last. */
  def lastInput: Int = last

  /** The input being read now (its end not handed out yet), or the number of inputs once finished. */
  def currentInput: Int = current

  /** Every input's end was handed out. */
  def isFinished: Boolean = current >= numInputs

  /**
   * A lower bound of the stored buffers still to come: the current input's, known once its view
   * is open, and one per [[UnionResultSubpartitionView.EndsPerFrame]] inputs not reached yet (their
   * sizes are not looked up before their turn; every frame sent re-announces the backlog).
   */
  def backlog: Int = {
    val v = view
    val notOpened = numInputs - current - (if (v != null) 1 else 0)
    val known = if (v != null) v.backlog.toLong else 0L
    math.min(known + (notOpened + UnionResultSubpartitionView.EndsPerFrame - 1) / UnionResultSubpartitionView.EndsPerFrame,
      Int.MaxValue.toLong).toInt
  }

  /**
   * The same in frames of `maxPayload` bytes, what the network sends it in: the current input's
   * stored bytes (once its view read them) or entries, whichever needs more frames, and one frame
   * per [[UnionResultSubpartitionView.EndsPerFrame]] inputs not reached.
   */
  def backlogFrames(maxPayload: Int): Int = {
    val v = view
    val notOpened = numInputs - current - (if (v != null) 1 else 0)
    val perFrame = UnionResultSubpartitionView.EndsPerFrame
    val known = v match {
      case null => 0L
      case b: BlockingSubpartitionView if b.remainingBytes >= 0 =>
        math.max((b.remainingBytes + maxPayload - 1) / maxPayload, (b.backlog + perFrame) / perFrame.toLong)
      case other => other.backlog.toLong
    }
    math.min(known + (notOpened + perFrame - 1) / perFrame, Int.MaxValue.toLong).toInt
  }

  /** The partition whose file the next read goes to (the current input's), or null once finished. */
  def nextPartition: ResultPartitionID = if (released || current >= numInputs) null else partitionId(current)

  /** Where in that file the next read goes: 0 until the current input's view read its entries. */
  def nextOffset: Long = view match {
    case b: BlockingSubpartitionView => b.nextOffset
    case _ => 0L
  }

  def isReleased: Boolean = released

  def releaseAllResources(): Unit = if (!released) {
    released = true
    val v = view
    if (v != null) { view = null; v.releaseAllResources() }
  }

  /** The input whose view is open now, or -1 (tests: no view of an input not reached or served). */
  private[sluice] def openInput: Int = if (view != null) current else -1

  def numberOfInputs: Int = numInputs
}

object UnionResultSubpartitionView {

  /** Ends of inputs one frame can carry at most: what the backlog assumes of inputs not reached. */
  val EndsPerFrame = 256

  /**
   * A cursor over `inputs` ((partition, subpartition start, end), each a finished blocking
   * partition registered in `manager`). Throws PartitionNotFoundException for the first missing
   * one (naming its position in `inputs`), IllegalArgumentException for a pipelined one, ProducerFailedException for one released,
   * IndexOutOfBoundsException for a range the partition does not have; nothing is opened here.
   * A ProducerFailedException, here or from [[getNextBuffer]], names the input's position too.
   * `sharedFiles`: the views read through the manager's kept file handles (only for the server's
   * read threads, never a task thread, which an interrupt could make close a shared handle).
   */
  def open(manager: ResultPartitionManager, inputs: IndexedSeq[(ResultPartitionID, Int, Int)],
      listener: BufferAvailabilityListener, sharedFiles: Boolean): UnionResultSubpartitionView = {
    val n = inputs.size
    val shuffleIds = new Array[Int](n)
    val producerIds = new Array[Long](n)
    val starts = new Array[Int](n)
    val ends = new Array[Int](n)
    var i = 0
    inputs.foreach { case (id, start, end) =>
      check(manager, id, i, start, end)
      shuffleIds(i) = id.shuffleId
      producerIds(i) = id.producerId
      starts(i) = start
      ends(i) = end
      i += 1
    }
    val view = new UnionResultSubpartitionView(manager, shuffleIds, producerIds, starts, ends, listener,
      if (sharedFiles) Some(manager.fileReaders) else None)
    if (n > 0) listener.notifyDataAvailable()
    view
  }

  /** What opening the input's view would check, without opening it. */
  private def check(manager: ResultPartitionManager, id: ResultPartitionID, input: Int, start: Int, end: Int): Unit = {
    val finished = manager.finishedSubpartitions(id) // a table row: checked without rebuilding the partition
    var partition: ResultPartition = null
    val numSubpartitions =
      if (finished >= 0) finished
      else {
        val p = manager.getPartition(id).getOrElse(throw new PartitionNotFoundException(id, input))
        if (p.partitionType != ResultPartitionType.Blocking) {
          throw new IllegalArgumentException(s"Result partition ($id) is pipelined: its subpartitions are requested " +
            "one channel each, not together with others")
        }
        if (p.isReleased) throw new ProducerFailedException(id, p.failureCause, input)
        if (!p.isFinished) {
          throw new IllegalStateException(s"$p is not complete yet; blocking partitions are read once finished")
        }
        partition = p
        p.numSubpartitions
      }
    if (start < 0 || end > numSubpartitions || start >= end) {
      val what =
        if (partition != null) partition.toString else ResultPartition.describe(ResultPartitionType.Blocking, id, finished)
      throw new IndexOutOfBoundsException(s"$what has no subpartitions [$start, $end)")
    }
  }
}
