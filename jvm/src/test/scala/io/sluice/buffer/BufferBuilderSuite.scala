package io.sluice.buffer

import java.util.concurrent.{ArrayBlockingQueue, TimeUnit}

import io.netty.buffer.ByteBuf
import io.sluice.NettyLeakDetection
import io.sluice.TestingThreads._
import io.sluice.memory.LocalBufferPool
import io.sluice.memory.TestingBufferPools._
import org.apache.spark.unsafe.Platform
import org.scalatest.funsuite.AnyFunSuite

/** BufferBuilder and its BufferConsumer: the lock-free hand-over between a writer and a reader. */
class BufferBuilderSuite extends AnyFunSuite with NettyLeakDetection {

  private def bytes(from: Int, n: Int): Array[Byte] = Array.tabulate(n)(i => (from + i).toByte)

  private def append(b: BufferBuilder, data: Array[Byte]): Int =
    b.append(data, Platform.BYTE_ARRAY_OFFSET, data.length)

  private def contents(slice: ByteBuf): Array[Byte] = {
    val a = new Array[Byte](slice.readableBytes())
    slice.getBytes(slice.readerIndex(), a)
    a
  }

  private def withPool[T](body: LocalBufferPool => T): T = withNetworkBufferPool(8, 4096) { global =>
    val pool = global.createBufferPool(1, 8, "builder test")
    try body(pool)
    finally pool.lazyDestroy()
  }

  test("the consumer sees only committed bytes, and each build continues where the last one stopped") {
    withPool { pool =>
      val builder = new BufferBuilder(pool.requestBuffer())
      val consumer = builder.createBufferConsumer()
      assert(append(builder, bytes(0, 10)) == 10)
      assert(builder.writtenBytes == 10)
      assert(!consumer.isDataAvailable, "appended but not committed")
      val none = consumer.build()
      assert(none.readableBytes() == 0)
      none.release()

      builder.commit()
      assert(consumer.isDataAvailable && consumer.unreadBytes == 10)
      val first = consumer.build()
      assert(contents(first).sameElements(bytes(0, 10)))

      append(builder, bytes(10, 5)); builder.commit()
      append(builder, bytes(15, 7)) // not committed
      val second = consumer.build()
      assert(contents(second).sameElements(bytes(10, 5)), "a flush-like build returns only the new bytes")
      builder.commit()
      val third = consumer.build()
      assert(contents(third).sameElements(bytes(15, 7)))
      assert(!consumer.isFinished && !consumer.isClosed, "the buffer stays in use across builds")
      assert(contents(first).sameElements(bytes(0, 10)), "slices built earlier stay valid")

      assert(builder.finish() == 22)
      assert(builder.isFinished && consumer.isFinished)
      assert(consumer.writtenBytes == 22)
      val last = consumer.build()
      assert(last.readableBytes() == 0)
      Seq(none, first, second, third, last).tail.foreach(_.release())
      builder.close()
      consumer.close()
    }
  }

  test("finish publishes bytes that were appended but not committed") {
    withPool { pool =>
      val builder = new BufferBuilder(pool.requestBuffer())
      val consumer = builder.createBufferConsumer()
      append(builder, bytes(1, 3))
      builder.finish()
      val s = consumer.build()
      assert(contents(s).sameElements(bytes(1, 3)))
      s.release(); builder.close(); consumer.close()
    }
  }

  test("an empty buffer can be finished") {
    withPool { pool =>
      val builder = new BufferBuilder(pool.requestBuffer())
      val consumer = builder.createBufferConsumer()
      assert(builder.finish() == 0)
      assert(consumer.isFinished && !consumer.isDataAvailable && consumer.writtenBytes == 0)
      builder.close(); consumer.close()
    }
  }

  test("appends stop at the buffer's capacity; ints are appended big-endian only when they fit") {
    withPool { pool =>
      val builder = new BufferBuilder(pool.requestBuffer())
      val consumer = builder.createBufferConsumer()
      assert(builder.appendIntIfFits(0x01020304))
      assert(append(builder, new Array[Byte](4096)) == 4096 - 4, "only what fits is copied")
      assert(builder.isFull && builder.writableBytes == 0)
      assert(!builder.appendIntIfFits(7))
      builder.commit()
      val s = consumer.build()
      assert(contents(s).take(4).sameElements(Array[Byte](1, 2, 3, 4)))
      s.release(); builder.close(); consumer.close()
    }
    withPool { pool =>
      val builder = new BufferBuilder(pool.requestBuffer())
      val consumer = builder.createBufferConsumer()
      append(builder, new Array[Byte](4093))
      assert(!builder.appendIntIfFits(1), "three bytes left: the int does not fit")
      assert(builder.writtenBytes == 4093)
      builder.appendByte(9)
      builder.commit()
      assert(consumer.writtenBytes == 4094)
      builder.close(); consumer.close()
    }
  }

  test("a builder has exactly one consumer") {
    withPool { pool =>
      val builder = new BufferBuilder(pool.requestBuffer())
      val consumer = builder.createBufferConsumer()
      intercept[IllegalArgumentException](builder.createBufferConsumer())
      builder.close(); consumer.close()
      builder.close(); consumer.close() // closing twice releases once
    }
  }

  test("the segment goes back to the pool only after the builder, the consumer and every slice let go") {
    val parts = Seq("builder", "consumer", "slice 1", "slice 2")
    parts.permutations.foreach { order =>
      withPool { pool =>
        val builder = new BufferBuilder(pool.requestBuffer())
        val consumer = builder.createBufferConsumer()
        append(builder, bytes(0, 8)); builder.commit()
        val s1 = consumer.build()
        append(builder, bytes(8, 8)); builder.commit()
        val s2 = consumer.build()
        builder.finish()
        val close = Map[String, () => Unit]("builder" -> (() => builder.close()),
          "consumer" -> (() => consumer.close()), "slice 1" -> (() => s1.release()), "slice 2" -> (() => s2.release()))
        order.zipWithIndex.foreach { case (part, i) =>
          assert(pool.numUsedBuffers == 1, s"released too early, before $part (order $order)")
          close(part)()
          if (i < order.size - 1) assert(builder.buffer.refCnt() == order.size - 1 - i)
        }
        assert(pool.numUsedBuffers == 0, s"not recycled after $order")
        assert(builder.buffer.refCnt() == 0)
      }
    }
  }

  test("a concurrent reader sees exactly the byte stream the writer wrote, across many buffers") {
    withNetworkBufferPool(4, 4096) { global =>
      val pool = global.createBufferPool(4, 4, "stream")
      val totalBytes = 4L << 20
      val handOver = new ArrayBlockingQueue[Option[BufferConsumer]](16) // None ends the stream
      val writer = fork("writer") {
        val rnd = new java.util.Random(42)
        var builder: BufferBuilder = null
        def next(): Unit = {
          if (builder != null) { builder.finish(); builder.close() }
          builder = new BufferBuilder(pool.requestBufferBlocking(60000))
          handOver.put(Some(builder.createBufferConsumer()))
        }
        next()
        var written = 0L
        var record = 0
        val scratch = new Array[Byte](10000)
        while (written < totalBytes) {
          val len = rnd.nextInt(scratch.length)
          var j = 0
          while (j < len) { scratch(j) = TestStream.byteOf(record, j); j += 1 }
          // length prefix, big-endian, split across buffers if need be
          var k = 0
          while (k < 4) {
            if (builder.isFull) next()
            builder.appendByte((len >>> (24 - 8 * k)).toByte)
            k += 1
          }
          var copied = 0
          while (copied < len) {
            if (builder.isFull) next()
            copied += builder.append(scratch, Platform.BYTE_ARRAY_OFFSET + copied, len - copied)
          }
          builder.commit()
          written += 4 + len
          record += 1
        }
        builder.finish(); builder.close()
        handOver.put(None)
        (record, written)
      }
      val reader = fork("reader") {
        val parser = new TestStream.Parser
        var builds = 0
        var next = handOver.poll(60, TimeUnit.SECONDS)
        while (next != None) {
          assert(next != null, "the writer stalled")
          val consumer = next.get
          var done = false
          while (!done) {
            val finished = consumer.isFinished
            val slice = consumer.build()
            builds += 1
            parser.feed(slice)
            slice.release()
            if (finished) done = true else Thread.onSpinWait()
          }
          assert(!consumer.isDataAvailable)
          consumer.close()
          next = handOver.poll(60, TimeUnit.SECONDS)
        }
        (parser.records, parser.bytes, builds)
      }
      val (records, written) = writer.join()
      val (readRecords, readBytes, builds) = reader.join()
      assert(written >= totalBytes)
      assert(readRecords == records)
      assert(readBytes == written)
      assert(builds >= written / 4096, "every buffer was read")
      pool.lazyDestroy()
    }
  }
}

/** The byte stream of the concurrent test: length-prefixed records with predictable bytes. */
private object TestStream {
  def byteOf(record: Int, i: Int): Byte = (record * 31 + i * 7).toByte

  /** Checks the stream as it arrives in arbitrary pieces. */
  final class Parser {
    var records = 0
    var bytes = 0L
    private var header = 0
    private var headerBytes = 0
    private var remaining = -1
    private var at = 0

    def feed(slice: ByteBuf): Unit = {
      var i = slice.readerIndex()
      val end = slice.writerIndex()
      bytes += end - i
      while (i < end) {
        if (remaining < 0) {
          header = (header << 8) | (slice.getByte(i) & 0xff)
          headerBytes += 1
          i += 1
          if (headerBytes == 4) {
            remaining = header; at = 0; header = 0; headerBytes = 0
            assert(remaining >= 0 && remaining < 10000, s"record $records has a corrupt length $remaining")
            if (remaining == 0) { records += 1; remaining = -1 }
          }
        } else {
          val b = slice.getByte(i)
          if (b != byteOf(records, at)) throw new AssertionError(s"record $records byte $at is $b, not ${byteOf(records, at)}")
          at += 1; i += 1; remaining -= 1
          if (remaining == 0) { records += 1; remaining = -1 }
        }
      }
    }
  }
}
