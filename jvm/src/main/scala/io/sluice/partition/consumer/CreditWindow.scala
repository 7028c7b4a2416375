package io.sluice.partition.consumer

/**
 * How many buffers one remote channel may hold for its sender (its credit window: exclusive plus
 * floating), tuned while the channel runs. Flink sizes the window from the sender's backlog alone,
 * capped by a gate's few floating buffers, which suits a gate of many channels that each carry
 * little; a Sluice channel of a regular shuffle carries everything one executor produced for the
 * task, and a window of ten 32 KiB buffers cannot cover the credit round trip (the task releases a
 * buffer, two event loops pass the AddCredit on, the sender's loop writes, the receiver's reads)
 * at the rate one connection can move.
 *
 * The window therefore follows the bandwidth-delay product of the credit loop, TCP-style:
 *  - it grows by half (at least one buffer) whenever the channel ran dry while its sender had data:
 *    a buffer arrives with a backlog behind it, the task had already read everything before it (the
 *    task waited for data that waited at the sender), and the channel has received more than its
 *    window since it started (not the first buffers, which always find the task waiting). The
 *    sender need not be out of credit: with a short window it sends each buffer as the last one's
 *    credit comes back, and a deeper window lets it keep several reads and writes in flight (a
 *    1 GB job's reducers waited 3 s with Flink's window, 0.6 s with a deep one);
 *  - it shrinks by one buffer whenever the task is what limits the channel: a buffer arrives while
 *    at least half the window already waits unread;
 *  - never below `initial` (buffersPerChannel + floatingBuffersPerGate, Flink's window) nor above
 *    `max` (spark.sluice.network.maxCreditWindow).
 * The window bounds what the channel's sender may have in flight plus what waits unread; within it
 * the channel asks only for what the sender's backlog needs ([[required]]), so an idle or small
 * channel holds its exclusive buffers and no more, and the gate's floating pool (shared, sized by
 * the executor's network memory) stays the bound on what all its channels hold.
 *
 * Not thread-safe: the channel's [[BufferManager]] calls it under its monitor.
 */
private[consumer] final class CreditWindow(val initial: Int, val max: Int) {
  require(initial >= 1 && max >= initial, s"bad credit window bounds [$initial, $max]")

  private var size = initial
  private var grown = 0L

  /** The current window, in buffers. */
  def current: Int = size

  /** How often the window grew (the channel ran dry while its sender had data). */
  def timesGrown: Long = grown

  /**
   * A buffer arrived, the channel's `received`-th. `backlog` is the buffers the sender still holds
   * for this channel, `unread` the buffers (or entries) that were waiting for the task when it arrived.
   */
  def onBufferReceived(backlog: Int, unread: Int, received: Long): Unit = {
    if (backlog > 0 && unread == 0 && received > size) {
      if (size < max) {
        size = math.min(max, size + math.max(1, size / 2))
        grown += 1
      }
    } else if (unread >= math.max(1, size / 2) && size > initial) {
      size -= 1
    }
  }

  /**
   * Free buffers to hold (credit, announced or not) with `backlog` buffers waiting at the sender,
   * `unread` waiting for the task and `exclusive` of the channel's own: Flink's backlog plus the
   * exclusive ones, as far as the window has room beside what is unread. Unread buffers count
   * against the window like a TCP receiver's unread bytes, so a task that stops reading stops the
   * channel's growth into the gate's pool; its exclusive buffers coming back still become credit
   * (see [[BufferManager]]), so the channel never stalls for good.
   */
  def required(backlog: Int, exclusive: Int, unread: Int): Int =
    math.max(0, math.min(exclusive + backlog, size - unread))
}
