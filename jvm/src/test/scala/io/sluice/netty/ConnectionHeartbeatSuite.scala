package io.sluice.netty

import java.util.concurrent.TimeoutException

import io.sluice.NettyLeakDetection
import io.sluice.config.SluiceOptions
import io.sluice.netty.TestingExecutor.{async, await, withExecutors}
import io.sluice.partition.ResultPartitionID
import io.sluice.partition.consumer.{GateInput, InputChannelException, ProducerLocation}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Hung peers: a server that stops answering without closing its sockets fails the channels that
 * read from it after the heartbeat timeout (not after the gate's request timeout, and not never),
 * while a healthy connection that carries no data for a long time (an idle pipelined partition, a
 * channel without credit, a credit-less client that stopped reading) stays up and delivers
 * everything afterwards.
 */
class ConnectionHeartbeatSuite extends AnyFunSuite with NettyLeakDetection {

  test("a peer that stops answering without closing fails its channels after the heartbeat timeout") {
    val silent = new TestingSilentServer
    val b = new TestingExecutor("B",
      Map(SluiceOptions.HeartbeatTimeout.key -> "1s",
        SluiceOptions.RequestTimeout.key -> "10min"))
    withExecutors(b) {
      try {
        val hung = ProducerLocation("H", "127.0.0.1", silent.port)
        val reader = new TestingGateReader(b.gate("r", Vector(GateInput(ResultPartitionID(1, 0), 0, 1, hung))))
        val reading = async(reader.readOne())
        val e = intercept[InputChannelException](await(reading, 120000))
        val causes = Iterator.iterate[Throwable](e)(_.getCause).takeWhile(_ != null).toSeq
        val declared = causes.collectFirst {
          case r: RemoteTransportException if r.getMessage.contains("heartbeatTimeout") => r
        }
        assert(declared.isDefined, s"the heartbeat declared the peer hung: ${causes.map(_.getMessage).mkString(" <- ")}")
        val msg = declared.get.getMessage
        assert(msg.contains(s"127.0.0.1:${silent.port}") && msg.contains("sent nothing for") &&
            msg.contains("spark.sluice.network.heartbeatTimeout=1000ms"), msg)
        assert(!causes.exists(_.isInstanceOf[TimeoutException]), "not the gate's request timeout")
        assert(e.getMessage.contains("executor H") && e.getMessage.contains(ResultPartitionID(1, 0).toString), e.getMessage)
        assert(silent.upgraded.get == 1)
        assert(b.counters.hungConnections.sum == 1)
        assert(b.counters.pingsSent.sum >= 1 && b.counters.pongsReceived.sum == 0, b.counters.toString)
        assert(b.connectionManager.numClientConnections == 0, "the hung connection was closed and forgotten")
        reader.close()
        b.awaitAllBuffersBack()
      } finally silent.close()
    }
  }

  test("a healthy connection without data or without credit for several heartbeat timeouts stays up") {
    val timeoutMs = 3000L
    val settings = Map(SluiceOptions.HeartbeatTimeout.key -> s"${timeoutMs}ms",
      SluiceOptions.RequestTimeout.key -> "10min", SluiceOptions.RequestBufferTimeout.key -> "10min")
    val a = new TestingExecutor("A", settings)
    val b = new TestingExecutor("B", settings)
    withExecutors(a, b) {
      val p = a.pipelinedPartition(ResultPartitionID(1, 0), 1)
      val reader = new TestingGateReader(b.gate("r", Vector(GateInput(p.partitionId, 0, 1, a.location))))
      val records = 3000
      TestingRecords.write(p, 0, TestingRecords.record(0, 0, 0, 1000))
      p.flushAll()
      assert(await(async(reader.readOne())), "the channel is open and reads")

      // An idle pipelined partition: nothing to send for more than three heartbeat timeouts.
      val idlePongs = b.counters.pongsReceived.sum
      waitSilentFor(3 * timeoutMs, b.counters.pongsReceived.sum - idlePongs >= 4)

      // No credit: the producer writes more than the channel's credit and nobody reads it.
      val producing = async {
        for (i <- 1 until records) TestingRecords.write(p, 0, TestingRecords.record(0, 0, i, 1000))
        p.finish()
      }
      waitUntil(p.backPressuredTimeNanosNow > 0, "the producer is backpressured")
      val creditlessPongs = b.counters.pongsReceived.sum
      waitSilentFor(3 * timeoutMs, b.counters.pongsReceived.sum - creditlessPongs >= 4)
      assert(!producing.isDone, "the producer is still waiting for credit")

      assert(await(async(reader.readAll()), 60000) == Map((0L, 0) -> records), "everything arrives afterwards")
      await(producing)
      assert(b.counters.hungConnections.sum == 0 && b.counters.connectionsOpened.sum == 1, b.counters.toString)
      assert(a.counters.pongsSent.sum >= 8 && b.counters.pongsReceived.sum >= 8, "the heartbeat was answered")
      reader.close()
      a.assertNoCreditViolations(); b.assertNoCreditViolations()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("credit-less: a connection the client stopped reading (no buffer free) is not declared hung") {
    val timeoutMs = 1000L
    val settings = Map(SluiceOptions.CreditBased.key -> "false", SluiceOptions.HeartbeatTimeout.key -> s"${timeoutMs}ms",
      SluiceOptions.RequestTimeout.key -> "10min", SluiceOptions.RequestBufferTimeout.key -> "10min")
    val smallSockets = Map("spark.sluice.io.receiveBuffer" -> "16384", "spark.sluice.io.sendBuffer" -> "16384")
    val a = new TestingExecutor("A", settings, smallSockets)
    val b = new TestingExecutor("B", settings, smallSockets)
    withExecutors(a, b) {
      val p = a.pipelinedPartition(ResultPartitionID(1, 0), 1)
      val reader = new TestingGateReader(b.gate("r", Vector(GateInput(p.partitionId, 0, 1, a.location))))
      val records = 2000
      val producing = async { TestingRecords.writeMany(p, 0, records, 1000); p.finish() }
      assert(await(async(reader.readOne())), "the channel is open and reads")
      // Nobody reads on: the gate's pool fills and the client stops reading the connection.
      waitUntil(b.connectionManager.clientFactory.isAnyStalled, "the client stopped reading")
      waitSilentFor(3 * timeoutMs, b.connectionManager.clientFactory.isAnyStalled)
      assert(b.counters.hungConnections.sum == 0, b.counters.toString)
      assert(await(async { reader.readAll() }, 60000) == Map((0L, 0) -> records))
      await(producing)
      assert(b.counters.hungConnections.sum == 0 && b.counters.connectionsOpened.sum == 1, b.counters.toString)
      reader.close()
      a.awaitAllBuffersBack(); b.awaitAllBuffersBack()
    }
  }

  test("a pooled connection without channels is neither pinged nor closed") {
    val settings = Map(SluiceOptions.HeartbeatTimeout.key -> "200ms")
    val a = new TestingExecutor("A", settings)
    val b = new TestingExecutor("B", settings)
    withExecutors(a, b) {
      val client = b.connectionManager.createPartitionRequestClient("127.0.0.1", a.port)
      val start = System.nanoTime()
      waitSilentFor(1000, condition = true)
      assert(client.isActive && b.counters.pingsSent.sum == 0 && b.counters.hungConnections.sum == 0)
      assert(System.nanoTime() - start >= 1000L * 1000000)
      assert(b.connectionManager.createPartitionRequestClient("127.0.0.1", a.port) eq client)
    }
  }

  /** Waits at least `ms` and until `condition` holds (the heartbeat's own answers are the clock). */
  private def waitSilentFor(ms: Long, condition: => Boolean): Unit = {
    val start = System.nanoTime()
    waitUntil(System.nanoTime() - start >= ms * 1000000L && condition, s"$ms ms passed with the condition met",
      timeoutMs = 20 * ms + 60000)
  }

  private def waitUntil(condition: => Boolean, what: => String, timeoutMs: Long = 60000): Unit = {
    val deadline = System.currentTimeMillis() + timeoutMs
    while (!condition && System.currentTimeMillis() < deadline) Thread.sleep(20)
    assert(condition, what)
  }
}
