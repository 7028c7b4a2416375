package io.sluice.memory

/** Takes a memory segment back once the last reference to its buffer is released. Thread-safe. */
trait BufferRecycler {
  def recycle(segment: MemorySegment): Unit
}
