package org.apache.spark.shuffle.sluice.rpc

import scala.concurrent.Await
import scala.concurrent.duration._

import io.sluice.partition.ResultPartitionID
import org.apache.spark.SparkConf
import org.apache.spark.internal.Logging
import org.apache.spark.shuffle.sluice.SluiceEnvironment
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.storage.BlockManagerId

/**
 * The driver's half of moving Sluice's map outputs off a decommissioning executor (the executor
 * halves are in [[SluiceShuffleBlockResolver]]). Spark's own shuffle has the receiving executor
 * report the moved index block to the BlockManagerMaster, which points the map output at that
 * executor's plain BlockManagerId; Sluice's readers also need the executor's Sluice port, which
 * travels in the location's topology info. So the receiving executor asks this small driver
 * endpoint instead, which points the MapStatus at the executor's Sluice location
 * ([[SparkInternals.mapOutputLocation]]), and answers whether the driver still knows the shuffle.
 * A decommissioning executor that copied a map output to Spark's fallback storage asks it the same
 * way, for the fallback storage's location ([[SparkInternals.fallbackStorageLocation]]); the
 * endpoint notes such shuffles, whose copies the driver deletes when Spark drops them.
 *
 * One endpoint per application, set up on the driver with the first shuffle when executors may
 * move shuffle blocks. Messages travel as [[RpcPayload]] bytes. Thread-safe.
 */
private[sluice] object ShuffleMigration extends Logging {

  val EndpointName = "SluiceShuffleMigration"

  final case class MapOutputMoved(shuffleId: Int, mapId: Long, location: BlockManagerId)
  final case class MapOutputMovedReply(shuffleKnown: Boolean)

  private val driverEndpoint = new LazyDriverEndpoint(EndpointName)

  /**
   * Whether decommissioning executors move their shuffle blocks: spark.storage.decommission.enabled
   * (default false) with spark.storage.decommission.shuffleBlocks.enabled (default true).
   */
  def enabled(conf: SparkConf): Boolean =
    conf.getBoolean("spark.storage.decommission.enabled", false) &&
      conf.getBoolean("spark.storage.decommission.shuffleBlocks.enabled", true)

  /** Sets up the driver's endpoint once (the driver, at the first shuffle, when [[enabled]]). */
  def ensureDriverEndpoint(): Unit = driverEndpoint.ensure(new Endpoint)

  private def ref: SparkInternals.DriverEndpointRef = driverEndpoint.ref

  /**
   * Points the map output of `id` at `location` on the driver, waiting up to spark.network.timeout
   * for the answer; whether the driver still knows the shuffle.
   */
  def relocate(conf: SparkConf, id: ResultPartitionID, location: BlockManagerId): Boolean = {
    val timeoutMs = SluiceEnvironment.networkTimeoutMs(conf)
    val future = ref.ask(RpcPayload.encode(MapOutputMoved(id.shuffleId, id.producerId, location)), timeoutMs,
      "spark.network.timeout")
    RpcPayload.decode(Await.result(future, timeoutMs.millis + 5.seconds)).asInstanceOf[MapOutputMovedReply].shuffleKnown
  }

  /**
   * Shuffles some map output of which was pointed at Spark's fallback storage (driver): their
   * copies are deleted when Spark drops them. Noted before the driver checks that it knows the
   * shuffle, so a copy made while the shuffle is being dropped is not forgotten.
   */
  private val inFallbackStorage = java.util.concurrent.ConcurrentHashMap.newKeySet[Int]()

  /** Whether shuffle `shuffleId` has copies in the fallback storage; forgets it (the driver drops the shuffle). */
  def takeFallbackShuffle(shuffleId: Int): Boolean = inFallbackStorage.remove(shuffleId)

  def reset(): Unit = {
    driverEndpoint.reset()
    inFallbackStorage.clear()
  }

  /** The driver's endpoint; Spark hands it one message at a time. */
  private final class Endpoint extends SparkInternals.DriverEndpoint {
    override def receive(message: Array[Byte]): Unit =
      logWarning(s"Unexpected one-way message ${RpcPayload.decode(message)}")

    override def receiveAndReply(message: Array[Byte], reply: SparkInternals.RpcReply): Unit =
      RpcPayload.decode(message) match {
        case MapOutputMoved(shuffleId, mapId, location) =>
          if (location == SparkInternals.fallbackStorageLocation) inFallbackStorage.add(shuffleId)
          val known = SparkInternals.updateMapOutput(shuffleId, mapId, location)
          logInfo(s"Map output $mapId of shuffle $shuffleId moved to $location" +
            (if (known) "" else s" after shuffle $shuffleId was unregistered"))
          reply.reply(RpcPayload.encode(MapOutputMovedReply(known)))
        case other => reply.fail(new IllegalArgumentException(s"Unexpected message $other"))
      }
  }
}
