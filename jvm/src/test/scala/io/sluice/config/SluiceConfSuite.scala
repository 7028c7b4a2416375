package io.sluice.config

import io.sluice.NettyLeakDetection
import org.scalatest.funsuite.AnyFunSuite

class SluiceConfSuite extends AnyFunSuite with NettyLeakDetection {

  private def rejected(settings: (String, String)*): String =
    intercept[IllegalArgumentException](SluiceConf(settings)).getMessage

  test("defaults") {
    val c = SluiceConf.defaults
    assert(c.segmentSize == 32 * 1024)
    assert(c.get(SluiceOptions.NetworkMemory) == 64L * 1024 * 1024)
    assert(c.numberOfSegments == 2048)
    assert(c.get(SluiceOptions.BuffersPerChannel) == 2)
    assert(c.get(SluiceOptions.FloatingBuffersPerGate) == 8)
    assert(c.get(SluiceOptions.MaxBuffersPerSubpartition) == 10)
    assert(c.get(SluiceOptions.BufferTimeout) == 100L)
    assert(c.get(SluiceOptions.RequestBufferTimeout) == 300000L)
    assert(c.get(SluiceOptions.CreditBased))
    assert(c.get(SluiceOptions.Port) == 0)
    assert(c.get(SluiceOptions.MaxFrameLength) == 1L << 20)
    assert(c.get(SluiceOptions.LatencyTrackingInterval) == 0L)
    assert(c.get(SluiceOptions.LatencyTrackingGranularity) == "operator")
    assert(c.raw.isEmpty)
  }

  test("values are parsed from Spark-style text; other Spark keys are ignored") {
    val c = SluiceConf(Seq(
        "spark.sluice.memory.segmentSize" -> "64k",
        "spark.sluice.network.memory" -> "64m",
        "spark.sluice.bufferTimeout" -> "5s",
        "spark.sluice.network.requestTimeout" -> "100ms",
        "spark.sluice.network.creditBased" -> "false",
        "spark.executor.memory" -> "not a Sluice key",
        "spark.shuffle.manager" -> "whatever"))
    assert(c.segmentSize == 65536)
    assert(c.numberOfSegments == 1024)
    assert(c.get(SluiceOptions.BufferTimeout) == 5000L)
    assert(c.get(SluiceOptions.RequestTimeout) == 100L)
    assert(!c.get(SluiceOptions.CreditBased))
    assert(c.raw.keySet == Set("spark.sluice.memory.segmentSize", "spark.sluice.network.memory",
      "spark.sluice.bufferTimeout", "spark.sluice.network.requestTimeout", "spark.sluice.network.creditBased"))
  }

  test("bufferTimeout -1 (flush only full buffers) and 0 (flush always) are valid") {
    assert(SluiceConf(Seq("spark.sluice.bufferTimeout" -> "-1")).get(SluiceOptions.BufferTimeout) == -1L)
    assert(SluiceConf(Seq("spark.sluice.bufferTimeout" -> "0")).get(SluiceOptions.BufferTimeout) == 0L)
  }

  test("a bad value fails the whole configuration, naming the key and the value") {
    val msg = rejected("spark.sluice.network.floatingBuffersPerGate" -> "many")
    assert(msg.contains("spark.sluice.network.floatingBuffersPerGate") && msg.contains("'many'"))
    val msg2 = rejected("spark.sluice.memory.segmentSize" -> "48k")
    assert(msg2.contains("spark.sluice.memory.segmentSize") && msg2.contains("'48k'") && msg2.contains("power of two"))
    val msg3 = rejected("spark.sluice.network.maxBuffersPerSubpartition" -> "0")
    assert(msg3.contains("spark.sluice.network.maxBuffersPerSubpartition") && msg3.contains("'0'"))
  }

  test("an unknown spark.sluice key fails with a did-you-mean suggestion, naming the key and the value") {
    val msg = rejected("spark.sluice.network.bufferPerChannel" -> "4")
    assert(msg.contains("spark.sluice.network.bufferPerChannel"))
    assert(msg.contains("4"))
    assert(msg.contains("did you mean spark.sluice.network.buffersPerChannel?"))
    val msg2 = rejected("spark.sluice.buffertimeout" -> "10ms")
    assert(msg2.contains("did you mean spark.sluice.bufferTimeout?"))
    val far = rejected("spark.sluice.completely.different" -> "1")
    assert(far.contains("spark.sluice.completely.different"))
    assert(!far.contains("did you mean"))
  }

  test("maxFrameLength left at its default rises with the segment size; set below it, it is refused") {
    val risen = SluiceConf(Seq("spark.sluice.memory.segmentSize" -> "1m"))
    assert(risen.get(SluiceOptions.MaxFrameLength) == SluiceConf.minMaxFrameLength(1L << 20))
    assert(risen.toString.contains(s"spark.sluice.network.maxFrameLength=${SluiceConf.minMaxFrameLength(1L << 20)}b"))
    assert(SluiceConf(Seq("spark.sluice.memory.segmentSize" -> "64k")).get(SluiceOptions.MaxFrameLength) == 1L << 20)
    val msg = rejected("spark.sluice.memory.segmentSize" -> "1m", "spark.sluice.network.maxFrameLength" -> "1m")
    assert(msg.contains("spark.sluice.network.maxFrameLength"))
    assert(msg.contains("'1m'"))
    assert(msg.contains("spark.sluice.memory.segmentSize"))
    val msg2 = rejected("spark.sluice.network.maxFrameLength" -> "16k")
    assert(msg2.contains("spark.sluice.network.maxFrameLength") && msg2.contains("'16k'"))
    val ok = SluiceConf(Seq("spark.sluice.memory.segmentSize" -> "1m", "spark.sluice.network.maxFrameLength" -> "2m"))
    assert(ok.get(SluiceOptions.MaxFrameLength) == 2L << 20)
  }

  test("the smallest maxFrameLength accepted holds a full segment under the largest packed header (encrypted)") {
    assert(SluiceConf.minMaxFrameLength(32L << 10) == 32768 + 9 + 32 + 256 * 37)
    val min = SluiceConf.minMaxFrameLength(32L << 10).toString
    val ok = SluiceConf(Seq("spark.sluice.network.maxFrameLength" -> min))
    assert(ok.get(SluiceOptions.MaxFrameLength) == 42281L)
    // The old rule (segment + 1k) is not enough: 256 encrypted entries need 9.3 KB of header.
    val msg = rejected("spark.sluice.network.maxFrameLength" -> (min.toLong - 1).toString)
    assert(
      msg.contains("spark.sluice.network.maxFrameLength") && msg.contains("spark.sluice.memory.segmentSize") &&
        msg.contains(s"(${ConfigType.BytesType.render(42281L)})"), msg)
    assert(rejected("spark.sluice.network.maxFrameLength" -> "33k").contains("'33k'"))
  }

  test("the server's read memory is taken from the network memory: an eighth by default, or as set") {
    val d = SluiceConf.defaults
    assert(d.numberOfSegments == 2048 && d.numberOfReadSegments == 256 && d.numberOfPoolSegments == 1792)
    val small = SluiceConf(Seq("spark.sluice.network.memory" -> "96k"))
    assert(small.numberOfReadSegments == 1 && small.numberOfPoolSegments == 2, "at least one to read into")
    val set = SluiceConf(Seq("spark.sluice.network.readMemory" -> "1m"))
    assert(set.numberOfReadSegments == 32 && set.numberOfPoolSegments == 2016)
    val all = rejected("spark.sluice.network.readMemory" -> "64m", "spark.sluice.network.memory" -> "64m")
    assert(all.contains("spark.sluice.network.readMemory=64m") && all.contains("spark.sluice.network.memory=64m") &&
        all.contains("leaves 0 of the 2048"), all)
    assert(SluiceConf(Seq("spark.sluice.network.readMemory" -> "4032k")).numberOfPoolSegments == 2048 - 126)
    assert(SluiceConf(Seq("spark.sluice.network.readMemory" -> "65472k")).numberOfPoolSegments == 2, "two are enough")
    val tiny = rejected("spark.sluice.network.readMemory" -> "16k")
    assert(tiny.contains("spark.sluice.network.readMemory=16k") && tiny.contains("less than one segment"), tiny)
  }

  test("network memory must hold at least three segments") {
    val msg = rejected("spark.sluice.memory.segmentSize" -> "64k", "spark.sluice.network.memory" -> "64k",
      "spark.sluice.network.maxFrameLength" -> "1m")
    assert(msg.contains("spark.sluice.network.memory"))
    assert(msg.contains("64k"))
  }

  test("network memory must hold what the executor's task slots need to make progress: refused below, accepted at it") {
    // 4 KiB segments, one of them the server's: 6 slots each hold 2 (a gate's floating minimum and
    // a map output's sort buffer), and a starting gate takes 2 scratch and 2 exclusive ones: 16.
    def conf(memory: String, more: (String, String)*) = SluiceConf(Seq("spark.sluice.memory.segmentSize" -> "4k",
      "spark.sluice.network.readMemory" -> "4k", "spark.sluice.network.memory" -> memory) ++ more)
    def refusal(c: SluiceConf, slots: Int, compressed: Boolean = true, remoteReads: Boolean = true): String =
      intercept[IllegalArgumentException](c.checkTaskSlots(slots, "spark.executor.cores=6 / spark.task.cpus=1", compressed,
          remoteReads)).getMessage
    val at = conf("68k")
    assert(at.numberOfPoolSegments == 16)
    at.checkTaskSlots(6, "six", compressed = true, remoteReads = true)
    val msg = refusal(conf("64k"), 6)
    assert(
      msg.startsWith("spark.sluice.network.memory=64k gives this executor's 6 task slots (spark.executor.cores=6 / " +
        "spark.task.cpus=1) 15 network buffers of 4096 bytes (spark.sluice.memory.segmentSize=4k"), msg)
    assert(
      msg.contains("fewer than the 16 they need") && msg.contains("spark.sluice.network.buffersPerChannel=2") &&
        msg.contains("spark.sluice.network.bufferRequestTimeout") && msg.contains("at least 68k"), msg)
    // A seventh slot needs two more; without compression a starting gate takes one scratch segment
    // less; on a local master a task holds no gate minimum and a gate no exclusive buffers.
    assert(refusal(at, 7).contains("fewer than the 18"))
    at.checkTaskSlots(7, "seven", compressed = false, remoteReads = false)
    assert(at.minPoolSegments(6, compressed = false, remoteReads = true) == 15)
    assert(at.minPoolSegments(14, compressed = true, remoteReads = false) == 16)
    assert(refusal(at, 15, remoteReads = false).contains("fewer than the 17"))
    // Credit-less gates, and gates past maxRequiredBuffersPerGate, take no exclusive buffers.
    assert(conf("68k", "spark.sluice.network.creditBased" -> "false").minPoolSegments(6, true, true) == 14)
    assert(conf("68k", "spark.sluice.network.buffersPerChannel" -> "20").minPoolSegments(6, true, true) == 14)
    assert(conf("68k", "spark.sluice.network.buffersPerChannel" -> "16").minPoolSegments(6, true, true) == 30)
    // With the default read memory (an eighth) the least memory named is accepted, and a segment less is not.
    val eighth = SluiceConf(Seq("spark.sluice.memory.segmentSize" -> "4k", "spark.sluice.network.memory" -> "64k"))
    assert(refusal(eighth, 6).contains("at least 72k"))
    SluiceConf(Seq("spark.sluice.memory.segmentSize" -> "4k", "spark.sluice.network.memory" -> "72k"))
      .checkTaskSlots(6, "six", compressed = true, remoteReads = true)
    refusal(SluiceConf(Seq("spark.sluice.memory.segmentSize" -> "4k", "spark.sluice.network.memory" -> "68k")), 6)
  }

  test("every rule between settings holds from its bound on, and names it below") {
    AtLeast.all.foreach { rule =>
      val least = rule.bound(64L << 10)
      val ref = rule.reference.key -> "64k"
      val ok = SluiceConf(Seq(ref, rule.subject.key -> s"${least}b"))
      assert(ok.get(rule.subject) == least, rule)
      val msg = rejected(ref, rule.subject.key -> s"${least - 1}b")
      assert(msg.startsWith(s"Invalid value '${least - 1}b' for ${rule.subject.key}: must be at least ${rule.formula}"),
        msg)
    }
  }

  test("withSettings changes some settings and keeps the others") {
    val c = SluiceConf(Seq("spark.sluice.bufferTimeout" -> "5ms"))
    val d = c.withSettings("spark.sluice.network.buffersPerChannel" -> "4")
    assert(d.get(SluiceOptions.BufferTimeout) == 5L)
    assert(d.get(SluiceOptions.BuffersPerChannel) == 4)
    assert(c.get(SluiceOptions.BuffersPerChannel) == 2)
    intercept[IllegalArgumentException](c.withSettings("spark.sluice.network.buffersPerChannel" -> "-4"))
    assert(d.toString.contains("spark.sluice.network.buffersPerChannel=4"))
    assert(d.toString.contains("spark.sluice.memory.segmentSize=32k"))
  }
}
