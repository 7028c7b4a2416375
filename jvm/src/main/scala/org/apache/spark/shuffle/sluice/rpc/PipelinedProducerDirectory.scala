package org.apache.spark.shuffle.sluice.rpc

import java.util.concurrent.TimeoutException

import scala.collection.mutable
import scala.concurrent.Await
import scala.concurrent.duration._

import org.apache.spark.internal.Logging
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.storage.BlockManagerId

/**
 * Tells the readers of a pipelined shuffle where its producers run, without polling. Producers
 * announce themselves to a small endpoint on the driver the moment they start; a reader asks once
 * and its answer is held back until every producer of the shuffle has announced itself, then sent
 * straight away. (Spark's built-in streaming shuffle polls the driver every 10 ms instead.)
 *
 * One endpoint per application, set up lazily on the driver when the first pipelined shuffle is
 * registered; executors reach it through the driver's RpcEnv ([[SparkInternals.driverEndpointRef]]),
 * with messages encoded by [[RpcPayload]]. Thread-safe.
 */
private[sluice] object PipelinedProducerDirectory extends Logging {

  val EndpointName = "SluicePipelinedProducerDirectory"

  /** How many shuffles' producer tables the driver keeps (each RTM batch is a new shuffle). */
  private val RetainedShuffles = 64

  /** A producer's location is the BlockManagerId its MapStatus would carry (Sluice port included). */
  final case class ProducerReady(shuffleId: Int, mapIndex: Int, location: BlockManagerId)
  final case class AwaitProducers(shuffleId: Int, numMaps: Int)
  final case class Producers(locations: Map[Int, BlockManagerId])

  private val driverEndpoint = new LazyDriverEndpoint(EndpointName)

  /** Sets up the driver's endpoint once (the driver, at the first pipelined shuffle). */
  def ensureDriverEndpoint(): Unit = driverEndpoint.ensure(new Endpoint)

  private def ref: SparkInternals.DriverEndpointRef = driverEndpoint.ref

  /** A producer announces itself (fire and forget). */
  def announce(shuffleId: Int, mapIndex: Int, location: BlockManagerId): Unit =
    ref.send(RpcPayload.encode(ProducerReady(shuffleId, mapIndex, location)))

  /** Where every producer of `shuffleId` runs, waiting up to `timeoutMs` for the last to start. */
  def awaitProducers(shuffleId: Int, numMaps: Int, timeoutMs: Long): Map[Int, BlockManagerId] = {
    val future = ref.ask(RpcPayload.encode(AwaitProducers(shuffleId, numMaps)), timeoutMs,
      "spark.sluice.network.requestTimeout")
    val answer =
      try RpcPayload.decode(Await.result(future, timeoutMs.millis + 5.seconds)).asInstanceOf[Producers]
      catch {
        case e: TimeoutException => throw new TimeoutException(s"Not every producer of pipelined shuffle $shuffleId " +
            s"started within ${timeoutMs}ms (spark.sluice.network.requestTimeout): ${e.getMessage}")
      }
    answer.locations
  }

  def reset(): Unit = driverEndpoint.reset()

  /** The driver's endpoint; Spark hands it one message at a time. */
  private final class Endpoint extends SparkInternals.DriverEndpoint {
    private final class Entry {
      val locations = mutable.Map.empty[Int, BlockManagerId]
      val waiting = mutable.ArrayBuffer.empty[(Int, SparkInternals.RpcReply)]
    }
    private val shuffles = mutable.LinkedHashMap.empty[Int, Entry]

    private def entry(shuffleId: Int): Entry = shuffles.getOrElseUpdate(shuffleId, {
        if (shuffles.size >= RetainedShuffles) {
          val (oldest, e) = shuffles.head
          shuffles.remove(oldest)
          e.waiting.foreach(_._2.fail(new IllegalStateException(s"pipelined shuffle $oldest was forgotten")))
        }
        new Entry
      })

    private def reply(to: SparkInternals.RpcReply, answer: Producers): Unit = to.reply(RpcPayload.encode(answer))

    override def receive(message: Array[Byte]): Unit = RpcPayload.decode(message) match {
      case ProducerReady(shuffleId, mapIndex, location) =>
        val en = entry(shuffleId)
        en.locations(mapIndex) = location
        val (ready, still) = en.waiting.partition { case (numMaps, _) => en.locations.size >= numMaps }
        ready.foreach { case (_, to) => reply(to, Producers(en.locations.toMap)) }
        en.waiting.clear()
        en.waiting ++= still
      case other => logWarning(s"Sluice's producer directory ignores $other")
    }

    override def receiveAndReply(message: Array[Byte], to: SparkInternals.RpcReply): Unit =
      RpcPayload.decode(message) match {
        case AwaitProducers(shuffleId, numMaps) =>
          val en = entry(shuffleId)
          if (en.locations.size >= numMaps) reply(to, Producers(en.locations.toMap))
          else en.waiting += (numMaps -> to)
        case other => to.fail(new IllegalArgumentException(s"Unexpected message $other"))
      }
  }
}
