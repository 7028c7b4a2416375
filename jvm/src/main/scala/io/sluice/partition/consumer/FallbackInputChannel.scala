package io.sluice.partition.consumer

import java.io.{IOException, InterruptedIOException}

import scala.util.control.NonFatal

import io.sluice.partition.{FallbackPartitionReader, FallbackStorage}

/**
 * An input channel over the map outputs a gate reads from Spark's decommissioning fallback storage
 * (where a decommissioned executor's outputs went when no peer took them; `storage`): no producer
 * runs, so no request, credit or network memory is involved. The task thread reads the inputs one
 * after another, each through a [[FallbackPartitionReader]] opened when its turn comes, every
 * stored buffer into the gate's read buffer, as stored (the gate decrypts, verifies and decompresses
 * it as it does a local channel's); each input ends with its own end of partition. Like Spark's
 * reader, which reads fallback blocks as local ones, it counts as a local channel. A read fails
 * this channel for the input being read (a FetchFailed for that map output); a read waits as long
 * as the file system's own timeouts let it. Task thread; [[releaseAllResources]] from any thread.
 *
 * @param storage the fallback storage (spark.storage.decommission.fallbackStorage.path); None when
 *                this executor has none, which fails the channel naming the setting
 */
final class FallbackInputChannel(
    gate: SingleInputGate,
    channelIndex: Int,
    inputs: IndexedSeq[ChannelInput],
    producer: ProducerLocation,
    storage: Option[FallbackStorage])
  extends InputChannel(gate, channelIndex, inputs, producer) {

  private var cursor = 0 // the input being read
  @volatile private var reader: FallbackPartitionReader = _ // its reader, once opened
  @volatile private var released = false

  override def isRemote: Boolean = false

  /** Nothing to ask anyone: the files can be read at once. */
  override def requestSubpartitions(): Unit = notifyChannelNonEmpty()

  override def getNextBuffer(): BufferAndAvailability = {
    checkError()
    if (released || cursor >= inputs.size) return null
    val in = inputs(cursor)
    try {
      if (reader == null) reader = FallbackPartitionReader.open(storage.getOrElse(throw noStorage()), in.partitionId,
        in.subpartitionStart, in.subpartitionEnd)
      val r = reader
      if (r.hasNext) {
        val target = gate.localReadBuffer(r.storedLength)
        val next = new BufferAndAvailability(in.index, target, r.subpartition, r.rawLength >= 0, r.rawLength, true, r.crc,
          true, r.iv)
        try r.readNext(target)
        catch { case e: Throwable => target.release(); throw e }
        next
      } else {
        closeReader()
        cursor += 1
        BufferAndAvailability.endOfPartition(in.index, in.subpartitionEnd - 1, moreAvailable = cursor < inputs.size)
      }
    } catch {
      case e: InterruptedIOException if Thread.currentThread().isInterrupted =>
        closeReader()
        val i = new InterruptedException(s"Reading ${in.partitionId} from the fallback storage was interrupted")
        i.initCause(e)
        throw i
      case NonFatal(e) => closeReader(); throw new InputChannelException(this, e, in.index)
    }
  }

  private def noStorage(): IOException = new IOException(s"The map output ${inputs(cursor).partitionId} is in Spark's " +
    "fallback storage, but this executor has none: is spark.storage.decommission.fallbackStorage.path set alike " +
    "for every executor?")

  private def closeReader(): Unit = {
    val r = reader
    reader = null
    if (r != null) {
      try r.close()
      catch { case NonFatal(_) => () } // a read-only handle: nothing is lost
    }
  }

  /** Closes the open reader; from another thread (the gate's close) the task thread is done reading or failing. */
  override def releaseAllResources(): Unit = if (!released) {
    released = true
    closeReader()
  }
}
