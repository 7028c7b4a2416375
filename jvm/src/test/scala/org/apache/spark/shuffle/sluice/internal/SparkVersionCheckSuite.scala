package org.apache.spark.shuffle.sluice.internal

import io.sluice.NettyLeakDetection
import org.scalatest.funsuite.AnyFunSuite

class SparkVersionCheckSuite extends AnyFunSuite with NettyLeakDetection {

  test("every Spark 4.3.x is accepted, including the running one") {
    SparkVersionCheck.verify()
    SparkVersionCheck.verify("4.3.0")
    SparkVersionCheck.verify("4.3.2")
    SparkVersionCheck.verify("4.3.1-SNAPSHOT")
  }

  test("another release line is refused with both versions named") {
    for (v <- Seq("4.2.1", "4.4.0", "3.5.3", "5.0.0-preview")) {
      val e = intercept[IllegalStateException](SparkVersionCheck.verify(v))
      assert(e.getMessage.contains(s"this is Spark $v"), e.getMessage)
      assert(e.getMessage.contains("built for Spark 4.3.x"), e.getMessage)
    }
  }
}
