package org.apache.spark.shuffle.sluice.rpc

import java.util.concurrent.atomic.AtomicInteger

import io.sluice.metrics._
import org.scalatest.funsuite.AnyFunSuite

class ReportCodecSuite extends AnyFunSuite {

  /**
   * An instance of case class `c` whose every field holds a value no other field holds (built from
   * its constructor's parameter types), so a field the codec drops, swaps or reads as another
   * fails the round trip, fields added later included.
   */
  private def distinct[T](c: Class[T], next: AtomicInteger): T = {
    val ctor = c.getConstructors.maxBy(_.getParameterCount)
    val generic = ctor.getGenericParameterTypes
    val args = ctor.getParameterTypes.zip(generic).map { case (t, g) => value(t, g, next) }
    c.cast(ctor.newInstance(args: _*))
  }

  private def typeArgs(g: java.lang.reflect.Type): Seq[java.lang.reflect.Type] = g match {
    case p: java.lang.reflect.ParameterizedType => p.getActualTypeArguments.toSeq
    case _ => Nil
  }

  private def classOfType(g: java.lang.reflect.Type): Class[_] = g match {
    case c: Class[_] => c
    case p: java.lang.reflect.ParameterizedType => p.getRawType.asInstanceOf[Class[_]]
    case w: java.lang.reflect.WildcardType => classOfType(w.getUpperBounds.head)
    case other => fail(s"no value for $other")
  }

  private def value(t: Class[_], g: java.lang.reflect.Type, next: AtomicInteger): AnyRef = {
    val n = next.incrementAndGet()
    if (t == classOf[Int]) Int.box(n)
    else if (t == classOf[Long]) Long.box(1000000000000L + n)
    else if (t == classOf[Double]) Double.box(n + 0.25)
    else if (t == classOf[Boolean]) Boolean.box(n % 2 == 1)
    else if (t == classOf[String]) s"value-$n"
    else if (t == classOf[Option[_]]) Some(element(typeArgs(g).head, next))
    else if (t == classOf[Seq[_]]) Seq(element(typeArgs(g).head, next), element(typeArgs(g).head, next))
    else if (t == classOf[Map[_, _]]) {
      Map(s"key-$n" -> element(typeArgs(g)(1), next), s"key-$n-b" -> element(typeArgs(g)(1), next))
    } else distinct(t, next).asInstanceOf[AnyRef]
  }

  /** A type argument's value (Scala erases `Long` in `Option[Long]` to Object: read from the field's signature). */
  private def element(g: java.lang.reflect.Type, next: AtomicInteger): AnyRef = {
    val c = classOfType(g)
    if (c == classOf[Object]) Long.box(2000000000000L + next.incrementAndGet()) else value(c, g, next)
  }

  test("a report with every field set round-trips, and so does a reply") {
    val next = new AtomicInteger()
    val built = distinct(classOf[SluiceMessages.Report], next)
    // Erased type arguments are built as Longs: the executor's rates are Doubles.
    val report = built.copy(snapshot = built.snapshot.copy(rates = Map("rate-a" -> 1.5, "rate-b" -> 2.75)))
    val task = report.snapshot.tasks.head
    assert(report.snapshot.tasks.size == 2 && task.latencyTotal.isDefined && task.bufferTimeoutMs.isDefined &&
      task.inputWaitByProducerMs.size == 2 && report.snapshot.totals.size == 2 && report.samples.head.tasks.size == 2 &&
      report.nodeService.isDefined && report.server.isDefined && report.partitionDirs.size == 2)
    assert(ReportCodec.decode(ReportCodec.encode(report)) == report)
    val reply = distinct(classOf[SluiceMessages.ReportReply], next)
    assert(reply.hostLocal.head.dirs.size == 2 && reply.servers.size == 2 && reply.requests.size == 2)
    assert(ReportCodec.decode(ReportCodec.encode(reply)) == reply)
    // The empty ones too.
    val empty = SluiceMessages.Report(ExecutorSnapshot("1", 0L, SegmentsSnapshot(0, 0, 0, 0), Nil), Nil)
    assert(ReportCodec.decode(ReportCodec.encode(empty)) == empty)
    assert(ReportCodec.decode(ReportCodec.encode(SluiceMessages.ReportReply(Nil))) == SluiceMessages.ReportReply(Nil))
  }

  test("what is not a report or reply, or is cut short or runs on, is refused, naming what is wrong") {
    val built = distinct(classOf[SluiceMessages.Report], new AtomicInteger())
    val bytes = ReportCodec.encode(built.copy(snapshot = built.snapshot.copy(rates = Map("rate" -> 0.5))))
    val serialised = RpcPayload.encode(SluiceMessages.ReportReply(Nil))
    assert(intercept[IllegalArgumentException](ReportCodec.decode(serialised)).getMessage.contains("0xac"))
    assert(intercept[IllegalArgumentException](ReportCodec.decode(Array.emptyByteArray)).getMessage
        .contains("Not a Sluice report"))
    for (cut <- Seq(1, 10, bytes.length / 2, bytes.length - 1)) {
      val e = intercept[IllegalArgumentException](ReportCodec.decode(java.util.Arrays.copyOf(bytes, cut)))
      assert(e.getMessage.contains("cut short") || e.getMessage.contains("a list of") || e.getMessage.contains("a map of"),
        s"cut at $cut: ${e.getMessage}")
    }
    val longer = java.util.Arrays.copyOf(bytes, bytes.length + 3)
    assert(intercept[IllegalArgumentException](ReportCodec.decode(longer)).getMessage.contains("3 bytes after its end"))
  }
}
