package io.sluice.config

import io.sluice.NettyLeakDetection
import io.sluice.config.ConfigType._
import org.scalatest.funsuite.AnyFunSuite

class ConfigTypeSuite extends AnyFunSuite with NettyLeakDetection {

  test("sizes parse with Spark's binary suffixes, upper or lower case, with or without spaces") {
    assert(BytesType.parse("32k") == Right(32L << 10))
    assert(BytesType.parse("64m") == Right(64L << 20))
    assert(BytesType.parse("1g") == Right(1L << 30))
    assert(BytesType.parse("2t") == Right(2L << 40))
    assert(BytesType.parse("4096") == Right(4096L))
    assert(BytesType.parse("4096b") == Right(4096L))
    assert(BytesType.parse(" 32 KiB ") == Right(32L << 10))
    assert(BytesType.parse("64MB") == Right(64L << 20))
  }

  test("sizes that are not sizes or do not fit a long are refused") {
    assert(BytesType.parse("lots").isLeft)
    assert(BytesType.parse("-1k").isLeft)
    assert(BytesType.parse("1.5m").isLeft)
    assert(BytesType.parse("32q").isLeft)
    assert(BytesType.parse("").isLeft)
    assert(BytesType.parse("9223372036854775807k") == Left("too large"))
  }

  test("sizes render the way users write them and parse back") {
    assert(BytesType.render(32L << 10) == "32k")
    assert(BytesType.render(64L << 20) == "64m")
    assert(BytesType.render(1L << 30) == "1g")
    assert(BytesType.render(1000L) == "1000b")
    assert(BytesType.render(0L) == "0b")
    Seq(0L, 1L, 1000L, 4096L, 3L << 20, 5L << 40).foreach { v =>
      assert(BytesType.parse(BytesType.render(v)) == Right(v))
    }
  }

  test("durations parse to milliseconds, including -1") {
    assert(DurationMsType.parse("100ms") == Right(100L))
    assert(DurationMsType.parse("5s") == Right(5000L))
    assert(DurationMsType.parse("-1") == Right(-1L))
    assert(DurationMsType.parse("0") == Right(0L))
    assert(DurationMsType.parse("250") == Right(250L))
    assert(DurationMsType.parse("2min") == Right(120000L))
    assert(DurationMsType.parse("2m") == Right(120000L))
    assert(DurationMsType.parse("1h") == Right(3600000L))
    assert(DurationMsType.parse("1d") == Right(86400000L))
    assert(DurationMsType.parse("1500us") == Right(1L))
    assert(DurationMsType.parse(" 3 SEC ") == Right(3000L))
  }

  test("durations that are not durations, or overflow a long once converted, are refused") {
    assert(DurationMsType.parse("soon").isLeft)
    assert(DurationMsType.parse("1.5s").isLeft)
    assert(DurationMsType.parse("5 fortnights").isLeft)
    // 18446744073709552 s is 2^64 + 384 ms: it must not wrap around to 384 ms.
    assert(DurationMsType.parse("18446744073709552s").isLeft)
    assert(DurationMsType.parse("9223372036854775807d").isLeft)
    assert(DurationMsType.parse("99999999999999999999").isLeft)
  }

  test("durations render in the largest whole unit and parse back") {
    assert(DurationMsType.render(100L) == "100ms")
    assert(DurationMsType.render(5000L) == "5s")
    assert(DurationMsType.render(120000L) == "2min")
    assert(DurationMsType.render(-1L) == "-1ms")
    assert(DurationMsType.render(0L) == "0ms")
    Seq(-1L, 0L, 1L, 999L, 1000L, 60000L, 61000L, 86400000L).foreach { v =>
      assert(DurationMsType.parse(DurationMsType.render(v)) == Right(v))
    }
  }

  test("ints, doubles, booleans and enums") {
    assert(IntType.parse(" 42 ") == Right(42))
    assert(IntType.parse("4.2").isLeft)
    assert(IntType.parse("99999999999").isLeft)
    assert(DoubleType.parse("0.5") == Right(0.5))
    assert(DoubleType.parse("NaN").isLeft)
    assert(BooleanType.parse("TRUE") == Right(true))
    assert(BooleanType.parse("false") == Right(false))
    assert(BooleanType.parse("yes").isLeft)
    val e = EnumType(Seq("single", "operator", "subtask"))
    assert(e.parse("Operator") == Right("operator"))
    assert(e.parse("task") == Left("not one of single, operator, subtask"))
  }
}
