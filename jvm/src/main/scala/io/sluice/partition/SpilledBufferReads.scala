package io.sluice.partition

import io.netty.buffer.ByteBuf

/**
 * Reads the stored bytes of a sequence of [[SpilledBuffer]]s into a frame's payload, back to back,
 * with one positional read for each run of buffers that lie back to back in one file (Flink's
 * PartitionedFileReader reads a region's buffers of one subpartition the same way): a frame of many
 * small buffers of one map output costs one system call, not one per buffer. A run holds a
 * reference to its file's reader until it is read, so the view that handed its buffers out may
 * drop its own meanwhile without the file being opened again. One read thread at a time.
 */
final class SpilledBufferReads {
  private var target: ByteBuf = _
  private var reader: PartitionedFileReader = _
  private var file: PartitionedFile = _
  private var start = 0L
  private var length = 0

  /** Positional reads made and bytes read since this was made. */
  var numReads = 0
  var numBytes = 0L

  /**
   * Appends `b`'s stored bytes to `into` after the bytes added before: read now, or with the
   * buffers that follow it in its file. Fails with an IOException when a run before it cannot be
   * read (or `b`'s file cannot be opened).
   */
  def add(b: SpilledBuffer, into: ByteBuf): Unit = {
    if (reader != null && ((into ne target) || (b.file ne file) || b.offset != start + length)) flush()
    if (reader == null) {
      reader = b.acquireReader()
      file = b.file
      target = into
      start = b.offset
      length = 0
    }
    length += b.storedLength
  }

  /** Reads the run added last into its payload (IOException when it cannot be read). */
  def flush(): Unit = if (reader != null) {
    val r = reader
    reader = null
    try {
      r.read(start, length, target)
      numReads += 1
      numBytes += length
    } finally {
      r.release()
      target = null
      file = null
    }
  }

  /** Drops the run added last without reading it (its frame failed). */
  def discard(): Unit = if (reader != null) {
    val r = reader
    reader = null
    target = null
    file = null
    r.release()
  }
}
