package org.apache.spark.shuffle.sluice

import scala.collection.mutable

import com.fasterxml.jackson.databind.JsonMappingException
import org.apache.spark.scheduler.{
  ReplayListenerBus, SparkListener, SparkListenerApplicationEnd, SparkListenerEvent, SparkListenerJobEnd, JobSucceeded
}
import org.apache.spark.util.JsonProtocol
import org.json4s._
import org.json4s.jackson.JsonMethods.{compact, parse}
import org.scalatest.funsuite.AnyFunSuite

/**
 * What a History Server whose Sluice jar differs from an application's makes of that application's
 * event log (docs/deploying.md, Upgrading Sluice): Spark's ReplayListenerBus, which the History
 * Server replays logs with, reading Sluice's events as another Sluice release would have written
 * them. Single-threaded.
 */
class SluiceEventLogUpgradeSuite extends AnyFunSuite {

  private val settings = SparkListenerSluiceSettings(200, 5, 32768, 20, 10)
  private val before = SparkListenerJobEnd(1, 10L, JobSucceeded)
  private val after = SparkListenerApplicationEnd(20L)

  private def json(event: SparkListenerEvent): JValue = parse(JsonProtocol.sparkEventToJsonString(event))

  /** The events the History Server's bus hands its listeners for `lines`, and whether replay succeeded. */
  private def replay(lines: Seq[String]): (Seq[SparkListenerEvent], Boolean) = {
    val seen = mutable.ArrayBuffer.empty[SparkListenerEvent]
    val bus = new ReplayListenerBus()
    bus.addListener(new SparkListener {
      override def onJobEnd(e: SparkListenerJobEnd): Unit = seen += e
      override def onApplicationEnd(e: SparkListenerApplicationEnd): Unit = seen += e
      override def onOtherEvent(e: SparkListenerEvent): Unit = seen += e
    })
    val ok = bus.replay(lines.iterator, "upgrade-test", maybeTruncated = false, ReplayListenerBus.SELECT_ALL_FILTER)
    (seen.toSeq, ok)
  }

  private def log(sluiceEvent: JValue): Seq[String] =
    Seq(JsonProtocol.sparkEventToJsonString(before), compact(sluiceEvent), JsonProtocol.sparkEventToJsonString(after))

  test("a newer release's event with a field this jar does not know replays, the field ignored") {
    val newer = json(settings) merge JObject("bufferDebloatTargetMs" -> JInt(7))
    val (events, ok) = replay(log(newer))
    assert(ok && events == Seq(before, settings, after), events)
  }

  test("an older release's event without a field this jar has replays, the field as the JVM's zero or null") {
    val older = json(settings).removeField(_._1 == "backpressureDelayMs")
    val (events, ok) = replay(log(older))
    assert(ok && events == Seq(before, settings.copy(backpressureDelayMs = 0L), after), events)
    // A missing reference (a String, a Seq) reads as null, not as the case class's default value:
    // SluiceEventPublisherSuite replays a stage event of a log older than its batch fields.
  }

  test("a renamed field loses its value silently") {
    val renamed = json(settings).transformField { case ("segmentSize", v) => ("segmentBytes", v) }
    val (events, ok) = replay(log(renamed))
    assert(ok && events(1) == settings.copy(segmentSize = 0), events)
  }

  test("an event class this jar does not have (no Sluice jar, or a renamed class) is dropped, the rest replays") {
    val unknown = json(settings).transformField {
      case ("Event", _) => ("Event", JString("org.apache.spark.shuffle.sluice.SparkListenerSluiceSettingsV2"))
    }
    val (events, ok) = replay(log(unknown))
    assert(ok && events == Seq(before, after), events)
  }

  test("a field whose type changed fails the replay of the whole application at that event") {
    val changed = json(settings).transformField { case ("segmentSize", _) => ("segmentSize", JString("32k")) }
    val seen = mutable.ArrayBuffer.empty[SparkListenerEvent]
    val bus = new ReplayListenerBus()
    bus.addListener(new SparkListener {
      override def onJobEnd(e: SparkListenerJobEnd): Unit = seen += e
      override def onOtherEvent(e: SparkListenerEvent): Unit = seen += e
    })
    val e = intercept[JsonMappingException] {
      bus.replay(log(changed).iterator, "upgrade-test", maybeTruncated = false, ReplayListenerBus.SELECT_ALL_FILTER)
    }
    assert(e.getMessage.contains("segmentSize"), e.getMessage)
    assert(seen == Seq(before), seen)
  }
}
