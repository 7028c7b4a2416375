package io.sluice.config

import io.sluice.NettyLeakDetection
import org.scalatest.funsuite.AnyFunSuite

class ConfigOptionSuite extends AnyFunSuite with NettyLeakDetection {

  private def failure(o: ConfigOption[_], raw: String): String =
    intercept[IllegalArgumentException](o.parse(raw)).getMessage

  test("every default renders to text that parses back to the default and is within its bounds") {
    SluiceOptions.all.foreach { o =>
      assert(o.parse(o.defaultString) == o.default, o.key)
    }
  }

  test("a value that does not parse names the key and the value") {
    val msg = failure(SluiceOptions.BufferTimeout, "soon")
    assert(msg.contains("spark.sluice.bufferTimeout"))
    assert(msg.contains("'soon'"))
    val msg2 = failure(SluiceOptions.BuffersPerChannel, "two")
    assert(msg2.contains("spark.sluice.network.buffersPerChannel") && msg2.contains("'two'"))
    val msg3 = failure(SluiceOptions.CreditBased, "maybe")
    assert(msg3.contains("spark.sluice.network.creditBased") && msg3.contains("'maybe'"))
    val msg4 = failure(SluiceOptions.LatencyTrackingGranularity, "task")
    assert(msg4.contains("spark.sluice.latencyTracking.granularity") && msg4.contains("subtask"))
  }

  test("a value out of range names the key, the value and the valid range") {
    val msg = failure(SluiceOptions.BuffersPerChannel, "0")
    assert(msg.contains("spark.sluice.network.buffersPerChannel"))
    assert(msg.contains("'0'"))
    assert(msg.contains("between 1 and 1024"))
    val msg2 = failure(SluiceOptions.BufferTimeout, "-2")
    assert(msg2.contains("spark.sluice.bufferTimeout") && msg2.contains("'-2'") && msg2.contains("at least -1ms"))
    val msg3 = failure(SluiceOptions.Port, "65536")
    assert(msg3.contains("spark.sluice.network.port") && msg3.contains("'65536'"))
    assert(failure(SluiceOptions.SegmentSize, "2k").contains("between 4k and 16m"))
    assert(failure(SluiceOptions.SegmentSize, "32m").contains("'32m'"))
  }

  test("a segment size that is not a power of two is refused") {
    val msg = failure(SluiceOptions.SegmentSize, "48k")
    assert(msg.contains("spark.sluice.memory.segmentSize"))
    assert(msg.contains("'48k'"))
    assert(msg.contains("not a power of two"))
    assert(SluiceOptions.SegmentSize.parse("64k") == (64L << 10))
  }

  test("bounds are described in the units users write") {
    assert(SluiceOptions.SegmentSize.checkDoc == "a power of two between 4k and 16m")
    assert(SluiceOptions.RequestBufferTimeout.checkDoc == "at least 1ms")
    assert(SluiceOptions.CreditBased.checkDoc == "")
    assert(Bounds(max = Some(10)).describe(_.toString) == "at most 10")
    assert(Bounds(Some(3), Some(5)).violation(Some(6)) == Some("out of range"))
    assert(Bounds(powerOfTwo = true).violation(Some(0)) == Some("not a power of two"))
    assert(Bounds(Some(3), Some(5)).violation(None).isEmpty)
  }

  test("keys must live under spark.sluice.") {
    intercept[IllegalArgumentException] {
      ConfigOption("spark.other.key", "other", ConfigType.IntType, 1, "doc", "none", "now", Bounds.none)
    }
  }

  test("either object of definitions initialises first: ServiceOptions before SluiceOptions, in a fresh class loader") {
    // A user's spark.plugins without Sluice's reached ServiceOptions (through the start-up rules)
    // before SluiceOptions: while ServiceOptions defined its options through SluiceOptions,
    // SluiceOptions.all read ServiceOptions.all as null, an ExceptionInInitializerError at start.
    val urls = System.getProperty("java.class.path").split(java.io.File.pathSeparator)
      .map(p => new java.io.File(p).toURI.toURL)
    for (first <- Seq("io.sluice.config.ServiceOptions$", "io.sluice.config.SluiceOptions$")) {
      val loader = new java.net.URLClassLoader(urls, ClassLoader.getPlatformClassLoader)
      // Objects of that loader: sizes read through reflection (its Seq is not this one's).
      def sizeOfAll(module: String): Int = {
        val m = Class.forName(module, true, loader).getField("MODULE$").get(null)
        val all = m.getClass.getMethod("all").invoke(m)
        all.getClass.getMethod("size").invoke(all).asInstanceOf[Int]
      }
      try {
        assert(sizeOfAll(first) > 0, first)
        assert(sizeOfAll("io.sluice.config.SluiceOptions$") == SluiceOptions.all.size, s"$first first")
        assert(sizeOfAll("io.sluice.config.ServiceOptions$") == ServiceOptions.all.size, s"$first first")
      } finally loader.close()
    }
  }
}
