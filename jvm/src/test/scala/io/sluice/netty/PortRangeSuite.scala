package io.sluice.netty

import java.net.{BindException, InetAddress, ServerSocket}

import io.sluice.NettyLeakDetection
import io.sluice.netty.TestingExecutor.withExecutors
import org.scalatest.funsuite.AnyFunSuite

/** The server's port range: spark.sluice.network.port as a base, retried upward up to spark.port.maxRetries. */
class PortRangeSuite extends AnyFunSuite with NettyLeakDetection {

  test("the ports tried: the base and maxRetries more, wrapping above 65535 to 1024; base 0 once") {
    assert(PortRange(40000, 3).ports == Seq(40000, 40001, 40002, 40003))
    assert(PortRange(65534, 3).ports == Seq(65534, 65535, 1024, 1025))
    assert(PortRange(0, 16).ports == Seq(0))
    assert(PortRange(40000, 0).ports == Seq(40000))
  }

  test("a failure other than a port in use is not retried") {
    var tried = Seq.empty[Int]
    val e = intercept[IllegalStateException] {
      PortRange(40000, 5).bind("127.0.0.1") { p => tried :+= p; throw new IllegalStateException("broken") }
    }
    assert(e.getMessage == "broken" && tried == Seq(40000))
  }

  test("taken ports are skipped: two servers on one base both bind, above the taken ones") {
    withTakenPorts(3) { taken =>
      // The base is the port below three taken ones: at most one server gets the base, the other
      // must skip the three taken ports (Spark's TransportServer reports them as BindExceptions).
      val base = (taken - 1).toString
      val a = new TestingExecutor("A", settings = Map("spark.sluice.network.port" -> base))
      val b = new TestingExecutor("B", settings = Map("spark.sluice.network.port" -> base))
      withExecutors(a, b) {
        val ports = Seq(a.port, b.port)
        assert(ports.distinct.size == 2 && ports.forall(p => p >= taken - 1 && p <= taken - 1 + 16), s"ports $ports")
        assert(ports.forall(p => p < taken || p > taken + 2), s"ports $ports, $taken..${taken + 2} taken")
        assert(ports.exists(_ > taken + 2), s"ports $ports: one server had to skip $taken..${taken + 2}")
      }
    }
  }

  test("every port of the range taken: a BindException naming both settings") {
    withTakenPorts(3) { taken =>
      val loopback = InetAddress.getByName("127.0.0.1")
      val e = intercept[BindException] {
        PortRange(taken, 2).bind("127.0.0.1")(p => new ServerSocket(p, 50, loopback)).close()
      }
      assert(e.getMessage.contains(s"spark.sluice.network.port=$taken and spark.port.maxRetries=2"), e.getMessage)
      assert(e.getMessage.contains(s"ports $taken, ${taken + 1}, ${taken + 2}"), e.getMessage)
      assert(PortRange.inUse(e.getCause), "the last port's own failure is the cause")
    }
  }

  test("one base fits spark.port.maxRetries + 1 servers on a host, whichever application they serve; the next fails") {
    val loopback = InetAddress.getByName("127.0.0.1")
    val maxRetries = PortRange.DefaultMaxRetries
    val held = scala.collection.mutable.Buffer.empty[ServerSocket]
    def bindOne(base: Int): ServerSocket = PortRange(base, maxRetries).bind("127.0.0.1")(p => new ServerSocket(p, 50, loopback))
    try {
      val base = withTakenPorts(maxRetries + 1)(identity) // free again once found
      (0 to maxRetries).foreach(_ => held += bindOne(base))
      assert(held.map(_.getLocalPort) == (base to base + maxRetries), held.map(_.getLocalPort))
      val e = intercept[BindException](held += bindOne(base))
      assert(e.getMessage.contains(s"every port of spark.sluice.network.port=$base and spark.port.maxRetries=$maxRetries"),
        e.getMessage)
    } finally held.foreach(_.close())
  }

  /**
   * Runs `body` with the first of `n` consecutive ports this JVM holds (found by trying random
   * bases until all `n` bind); the ports are released afterwards.
   */
  private def withTakenPorts[T](n: Int)(body: Int => T): T = {
    val loopback = InetAddress.getByName("127.0.0.1")
    def hold(from: Int): Option[Seq[ServerSocket]] = {
      val held = Seq.newBuilder[ServerSocket]
      try {
        (from until from + n).foreach(p => held += new ServerSocket(p, 50, loopback))
        Some(held.result())
      } catch {
        case _: java.io.IOException => held.result().foreach(_.close()); None
      }
    }
    val bases = Iterator.continually(20000 + scala.util.Random.nextInt(30000))
    val (base, sockets) = bases.take(50).map(b => b -> hold(b)).collectFirst { case (b, Some(s)) => b -> s }
      .getOrElse(fail(s"found no $n free consecutive ports"))
    try body(base)
    finally sockets.foreach(_.close())
  }
}
