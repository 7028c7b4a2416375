package io.sluice.netty

import java.io.{ByteArrayOutputStream, IOException}
import java.nio.ByteBuffer
import java.nio.channels.{ClosedChannelException, WritableByteChannel}

import io.netty.channel.{DefaultFileRegion, FileRegion}
import io.netty.channel.embedded.EmbeddedChannel
import io.netty.util.AbstractReferenceCounted
import io.sluice.NettyLeakDetection
import org.scalatest.funsuite.AnyFunSuite

/** A spilled payload whose file fails mid-way still fills its frame, and says so; a broken socket still fails. */
class GuardedFileRegionSuite extends AnyFunSuite with NettyLeakDetection {

  private val id = InputChannelID(1, 2)

  /** A region of `count` bytes (value 7) whose file fails after `failAfter` bytes, at most `chunk` a call. */
  private final class FailingRegion(size: Long, failAfter: Long, chunk: Int = 100) extends AbstractReferenceCounted
    with FileRegion {
    private var done = 0L
    var deallocated = false
    override def position(): Long = 0
    override def count(): Long = size
    override def transferred(): Long = done
    @deprecated("", "") override def transfered(): Long = done
    override def transferTo(target: WritableByteChannel, position: Long): Long = {
      assert(position == done, "asked for the bytes after those already sent")
      if (done >= failAfter) throw new IOException("/tmp/x.data was released")
      val n = math.min(chunk.toLong, math.min(failAfter, size) - done).toInt
      val w = target.write(ByteBuffer.wrap(Array.fill[Byte](n)(7)))
      done += w
      w
    }
    override protected def deallocate(): Unit = deallocated = true
    override def retain(): FileRegion = { super.retain(); this }
    override def retain(i: Int): FileRegion = { super.retain(i); this }
    override def touch(): FileRegion = this
    override def touch(hint: AnyRef): FileRegion = this
  }

  private final class Sink(var broken: Boolean = false, limit: Int = Int.MaxValue) extends WritableByteChannel {
    val bytes = new ByteArrayOutputStream()
    override def write(src: ByteBuffer): Int = {
      if (broken) throw new IOException("Broken pipe")
      val n = math.min(src.remaining(), limit)
      val a = new Array[Byte](n); src.get(a); bytes.write(a); n
    }
    override def isOpen: Boolean = !broken
    override def close(): Unit = ()
  }

  private def sendAll(region: FileRegion, sink: Sink): Unit = {
    var calls = 0
    while (region.transferred() < region.count()) {
      region.transferTo(sink, region.transferred())
      calls += 1
      assert(calls < 10000, "no progress")
    }
  }

  test("a file that fails mid-way: the rest of the payload goes out as zeros and the write fails with the receiver's id") {
    val ch = new EmbeddedChannel()
    val promise = ch.newPromise()
    val inner = new FailingRegion(size = 5000, failAfter = 1234)
    val region = new GuardedFileRegion(inner, id, promise)
    val sink = new Sink(limit = 1000) // a socket taking at most 1000 bytes a call
    sendAll(region, sink)
    val out = sink.bytes.toByteArray
    assert(out.length == 5000, "the frame stays whole")
    assert(out.take(1234).forall(_ == 7) && out.drop(1234).forall(_ == 0))
    assert(region.failed)
    region.operationComplete(ch.newSucceededFuture())
    val e = promise.cause()
    assert(e.isInstanceOf[UnreadablePayloadException], e)
    assert(e.asInstanceOf[UnreadablePayloadException].receiverId == id)
    assert(e.getMessage.contains("5000-byte spilled buffer") && e.getMessage.contains("was released"), e.getMessage)
    region.release()
    assert(inner.deallocated, "the file region is released with the guard")
    ch.finishAndReleaseAll()
  }

  test("a readable file goes out unchanged and the write succeeds") {
    val ch = new EmbeddedChannel()
    val promise = ch.newPromise()
    val region = new GuardedFileRegion(new FailingRegion(size = 3000, failAfter = Long.MaxValue), id, promise)
    val sink = new Sink()
    sendAll(region, sink)
    assert(sink.bytes.toByteArray.length == 3000 && sink.bytes.toByteArray.forall(_ == 7) && !region.failed)
    region.operationComplete(ch.newSucceededFuture())
    assert(promise.isSuccess)
    region.release()
    ch.finishAndReleaseAll()
  }

  test("a broken socket still fails the write itself (connection-wide), zeros or not") {
    val ch = new EmbeddedChannel()
    val promise = ch.newPromise()
    val region = new GuardedFileRegion(new FailingRegion(size = 3000, failAfter = 0), id, promise)
    val sink = new Sink(broken = true)
    val e = intercept[IOException](region.transferTo(sink, 0))
    assert(e.getMessage == "Broken pipe")
    val cause = new ClosedChannelException
    region.operationComplete(ch.newFailedFuture(cause))
    assert(promise.cause() eq cause, "the socket's failure, not the file's")
    region.release()
    ch.finishAndReleaseAll()
  }

  test("Netty's own file region of a deleted file fails only the guarded write") {
    val f = java.io.File.createTempFile("sluice-guard", ".data")
    java.nio.file.Files.write(f.toPath, Array.fill[Byte](100)(3))
    val inner = new DefaultFileRegion(f, 0, 100)
    assert(f.delete())
    val ch = new EmbeddedChannel()
    val promise = ch.newPromise()
    val region = new GuardedFileRegion(inner, id, promise)
    val sink = new Sink()
    sendAll(region, sink)
    assert(sink.bytes.toByteArray.toSeq == Seq.fill[Byte](100)(0) && region.failed)
    region.operationComplete(ch.newSucceededFuture())
    assert(promise.cause().isInstanceOf[UnreadablePayloadException])
    region.release()
    ch.finishAndReleaseAll()
  }
}
