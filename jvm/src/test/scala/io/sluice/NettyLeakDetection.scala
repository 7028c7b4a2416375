package io.sluice

import java.lang.ref.{Reference, ReferenceQueue, WeakReference}
import java.util.concurrent.ConcurrentLinkedQueue

import io.netty.buffer.Unpooled
import io.netty.util.ResourceLeakDetector
import org.scalatest.{Failed, Outcome, TestSuite, TestSuiteMixin}

/**
 * Fails the test during which a Netty ByteBuf (Netty's own, or a Sluice network buffer) was
 * garbage-collected without its last release. The JVM tests run with Netty's leak detector at
 * its strictest (`-Dio.netty.leakDetection.level=paranoid`: every buffer is tracked, with the
 * places that touched it) and with [[RecordingLeakDetector]] as its implementation
 * (`-Dio.netty.customResourceLeakDetector`, both set by build.gradle's scalaTest task).
 *
 * Netty reports a leak only when a buffer's weak reference was cleared by a collection and the
 * detector tracks its next buffer; so after each test this collects garbage, waits for the
 * collector's reference processing, and has every detector track one object.
 */
trait NettyLeakDetection extends TestSuiteMixin { this: TestSuite =>

  abstract override def withFixture(test: NoArgTest): Outcome = {
    NettyLeakDetection.checkInstalled()
    val before = RecordingLeakDetector.drain() // became unreachable since the last test: set-up or background work
    val outcome = super.withFixture(test)
    val after = NettyLeakDetection.collectLeaks()
    val leaks = before.map("(found before this test began) " + _) ++ after
    if (leaks.isEmpty) outcome
    else if (!outcome.isSucceeded) {
      System.err.println(s"${test.name} also leaked:\n${leaks.mkString("\n")}")
      outcome
    } else {
      Failed(new AssertionError(s"${leaks.size} Netty buffer(s) leaked (garbage-collected without their last " +
          s"release):\n${leaks.mkString("\n")}"))
    }
  }
}

object NettyLeakDetection {

  private lazy val installed: Unit = {
    Unpooled.directBuffer(1).release() // creates the ByteBuf detector
    require(ResourceLeakDetector.getLevel == ResourceLeakDetector.Level.PARANOID && RecordingLeakDetector.numDetectors > 0,
      "run the JVM tests with -Dio.netty.leakDetection.level=paranoid " +
        s"-Dio.netty.customResourceLeakDetector=${classOf[RecordingLeakDetector[_]].getName} (build.gradle's scalaTest does)")
  }

  def checkInstalled(): Unit = installed

  /** Collects garbage and returns the leaks Netty reports for it (and any reported since the last call). */
  def collectLeaks(): Seq[String] = {
    val queue = new ReferenceQueue[AnyRef]
    val sentinel = new WeakReference[AnyRef](new Object, queue)
    System.gc()
    // Weak references are cleared by the collection and then queued, in batches, by the JDK's one
    // reference-handler thread: the sentinel's arrival shows its batch was taken, not that it was
    // all queued (it may come first; a leak then showed in the next test, in CI). The JDK's own
    // wait for that thread (what direct-memory reservation uses) covers the rest of the batch.
    queue.remove(5000)
    Reference.reachabilityFence(sentinel)
    while (waitForReferenceProcessing.invoke(null).asInstanceOf[Boolean]) {}
    RecordingLeakDetector.pollAll()
    RecordingLeakDetector.drain()
  }

  /** java.lang.ref.Reference's private wait for pending references (opened to tests by build.gradle's --add-opens). */
  private lazy val waitForReferenceProcessing = {
    val m = classOf[Reference[_]].getDeclaredMethod("waitForReferenceProcessing")
    m.setAccessible(true)
    m
  }
}

/**
 * Netty's leak detector, keeping what it reports for [[NettyLeakDetection]] (and still logging it).
 * Netty creates one per tracked resource type when it is named by `-Dio.netty.customResourceLeakDetector`.
 */
class RecordingLeakDetector[T](resourceType: Class[_], samplingInterval: Int)
  extends ResourceLeakDetector[T](resourceType, samplingInterval) {

  // The constructor Netty looks for first (it logs an error when it is missing).
  def this(resourceType: Class[_], samplingInterval: Int, maxActive: Long) = this(resourceType, samplingInterval)

  RecordingLeakDetector.detectors.add(this)

  // Report even when Netty's logger is quiet: the report is what fails the test.
  override protected def needReport(): Boolean = true

  override protected def reportTracedLeak(resourceType: String, records: String): Unit = {
    RecordingLeakDetector.leaks.add(s"LEAK: a $resourceType was garbage-collected without its last release.$records")
    super.reportTracedLeak(resourceType, records)
  }

  override protected def reportUntracedLeak(resourceType: String): Unit = {
    RecordingLeakDetector.leaks.add(s"LEAK: a $resourceType was garbage-collected without its last release " +
      "(no record of where it was used)")
    super.reportUntracedLeak(resourceType)
  }
}

object RecordingLeakDetector {
  private val detectors = new ConcurrentLinkedQueue[RecordingLeakDetector[_]]()
  private val leaks = new ConcurrentLinkedQueue[String]()

  def numDetectors: Int = detectors.size

  /** Has every detector look at its collected references: Netty does so when it tracks a new object. */
  def pollAll(): Unit = detectors.forEach { d =>
    val probe = new Object
    val tracker = d.asInstanceOf[ResourceLeakDetector[AnyRef]].track(probe)
    if (tracker != null) tracker.close(probe)
  }

  /** The leaks reported since the last call. */
  def drain(): Seq[String] = {
    val out = Seq.newBuilder[String]
    var l = leaks.poll()
    while (l != null) { out += l; l = leaks.poll() }
    out.result()
  }
}
