package org.apache.spark.shuffle.sluice

import java.io.{ByteArrayOutputStream, File, IOException}
import java.nio.ByteBuffer
import java.nio.channels.FileChannel
import java.nio.file.StandardOpenOption
import java.util.concurrent.ConcurrentHashMap

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.sluice.ShuffleEnvironment
import io.sluice.partition.ResultPartitionID
import org.apache.spark.SparkConf
import org.apache.spark.network.buffer.{FileSegmentManagedBuffer, ManagedBuffer, NioManagedBuffer}
import org.apache.spark.network.client.StreamCallbackWithID
import org.apache.spark.network.shuffle.MergedBlockMeta
import org.apache.spark.network.util.TransportConf
import org.apache.spark.serializer.SerializerManager
import org.apache.spark.shuffle.{IndexShuffleBlockResolver, ShuffleBlockInfo}
import org.apache.spark.storage.{BlockId, ShuffleDataBlockId, ShuffleIndexBlockId, ShuffleMergedBlockId}

/**
 * Sluice's shuffle block resolver. Readers fetch Sluice's shuffle data over Sluice's own
 * transport, never through Spark's BlockManager, so block lookups fail saying so (push-based
 * merge included). What Spark does need from it is decommissioning's shuffle migration
 * (SPARK-20629): it is the [[MigratableResolver]] through which a decommissioning executor's
 * BlockManager moves its finished blocking partitions to peer executors, so their map outputs
 * survive the executor without a recompute.
 *
 *  - `getStoredShuffles`: the executor's finished blocking partitions, as (shuffle, map id); none
 *    when a node shuffle service serves them (it keeps them when the executor goes).
 *  - `getMigrationBlocks`: two blocks per partition, sent in this order: its index
 *    (`shuffle_S_M_0.index`, a [[io.sluice.partition.PartitionedFileIndex]]) and its file
 *    (`shuffle_S_M_0.data`, sent from disk unchanged: compressed and encrypted as written).
 *  - `putShuffleBlockAsStream`, on the receiving executor: keeps the index until the file
 *    follows, writes the file into a local dir, adopts the partition in the executor's
 *    [[ShuffleEnvironment]] under the same ResultPartitionID, and has the driver point the map
 *    output at this executor (with its Sluice port) before the sender counts the block as moved.
 *  - `getIndexFile`, asked by Spark's FallbackStorage.copy when the decommissioner hands a map
 *    output to its fallback storage (no live peer, or the transfer to one failed): the partition's
 *    file and index are copied there ([[SluiceFallbackStorage]]) and the driver points the map
 *    output at the fallback storage; the answer is a file that does not exist, so Spark's own copy
 *    (of sort-shuffle files) does nothing.
 *
 * Pipelined partitions (Real-Time Mode) are never listed: they are read while written and leave
 * nothing to move. A received file that cannot be adopted is deleted; adopted ones are released,
 * and their files deleted, when their shuffle is unregistered, like any other. Thread-safe.
 *
 * It is an IndexShuffleBlockResolver only because [[SluiceShuffleManager]] is a
 * SortShuffleManager, whose resolver has that type (see there why). Every method of the sort
 * shuffle's files (data, index and checksum files, their commit and removal) fails saying
 * Sluice keeps no such files; none of Spark's own callers reaches them, since Sluice's manager
 * replaces the sort shuffle's writers, readers and shuffle removal.
 *
 * @param startedEnvironment the executor's environment if it runs (the sending side)
 * @param environment        the executor's environment, started if needed (the receiving side)
 * @param relocate           tells the driver that the map output of a partition now lives in the
 *                           executor whose Sluice server has the given port; false when the driver
 *                           no longer knows the shuffle
 * @param maxDiskSize        spark.storage.decommission.shuffleBlocks.maxDiskSize: partitions are
 *                           refused while the executor's blocking partition files exceed it
 * @param transportConf      how files are sent (Spark's shuffle TransportConf)
 * @param fallback           where map outputs go when Spark puts them in its fallback storage, and
 *                           how the driver learns it; None without a fallback storage
 */
private[sluice] final class SluiceShuffleBlockResolver(
    conf: SparkConf,
    startedEnvironment: () => Option[ShuffleEnvironment],
    environment: () => ShuffleEnvironment,
    relocate: (ResultPartitionID, Int) => Boolean,
    maxDiskSize: Option[Long],
    transportConf: () => TransportConf,
    fallback: Option[SluiceShuffleBlockResolver.FallbackTarget] = None) extends IndexShuffleBlockResolver(conf) {

  import SluiceShuffleBlockResolver._

  /** Indexes received, waiting for their partition's file (the next block of the same sender). */
  private val pendingIndexes = new ConcurrentHashMap[ResultPartitionID, Array[Byte]]()

  private def unsupported(what: String): Nothing = throw new UnsupportedOperationException(
    s"$what: Sluice serves shuffle data over its own transport, not through Spark's BlockManager")

  override def getBlockData(blockId: BlockId, dirs: Option[Array[String]]): ManagedBuffer =
    unsupported(s"getBlockData($blockId)")

  override def getMergedBlockData(blockId: ShuffleMergedBlockId, dirs: Option[Array[String]]): Seq[ManagedBuffer] =
    unsupported(s"getMergedBlockData($blockId) (push-based shuffle)")

  override def getMergedBlockMeta(blockId: ShuffleMergedBlockId, dirs: Option[Array[String]]): MergedBlockMeta =
    unsupported(s"getMergedBlockMeta($blockId) (push-based shuffle)")

  // ---- the sort shuffle's files, which Sluice never writes -----------------------------------------

  private def noSortShuffleFiles(what: String): Nothing = throw new UnsupportedOperationException(
    s"$what: Sluice keeps no sort-shuffle data, index or checksum files (its partitions are its own files)")

  override def getDataFile(shuffleId: Int, mapId: Long): File = noSortShuffleFiles(s"getDataFile($shuffleId, $mapId)")

  override def getDataFile(shuffleId: Int, mapId: Long, dirs: Option[Array[String]]): File =
    noSortShuffleFiles(s"getDataFile($shuffleId, $mapId)")

  /**
   * Spark's FallbackStorage.copy (the one caller with Sluice's manager, `dirs` None) asks for the
   * sort shuffle's index file of a map output it is to copy: Sluice copies its own files instead
   * and answers a file that does not exist, so Spark copies and reports nothing more. Anything
   * else is refused.
   */
  override def getIndexFile(shuffleId: Int, mapId: Long, dirs: Option[Array[String]]): File = fallback match {
    case Some(f) if dirs.isEmpty =>
      copyToFallbackStorage(f, ResultPartitionID(shuffleId, mapId))
      new File(nowhere, s"shuffle_${shuffleId}_${mapId}_$ReduceId.index")
    case _ => noSortShuffleFiles(s"getIndexFile($shuffleId, $mapId)")
  }

  override def getChecksumFile(shuffleId: Int, mapId: Long, algorithm: String, dirs: Option[Array[String]]): File =
    noSortShuffleFiles(s"getChecksumFile($shuffleId, $mapId)")

  override def getChecksums(checksumFile: File, blockNum: Int): Array[Long] =
    noSortShuffleFiles(s"getChecksums($checksumFile)")

  override def createTempFile(file: File): File = noSortShuffleFiles(s"createTempFile($file)")

  override def writeMetadataFileAndCommit(shuffleId: Int, mapId: Long, lengths: Array[Long], checksums: Array[Long],
      dataTmp: File): Unit = noSortShuffleFiles(s"writeMetadataFileAndCommit($shuffleId, $mapId)")

  /** Nothing to remove: Sluice releases a shuffle's partitions, and their files, when it is unregistered. */
  override def removeDataByMap(shuffleId: Int, mapId: Long): Unit = ()

  /** No BlockManager blocks: Sluice's map outputs are not served through it (as the trait's default). */
  override def getBlocksForShuffle(shuffleId: Int, mapId: Long): Seq[BlockId] = Nil

  // ---- sending (the decommissioning executor) ----------------------------------------------------

  override def getStoredShuffles(): Seq[ShuffleBlockInfo] =
    startedEnvironment().toSeq.filter(_.nodeService.isEmpty).flatMap(_.finishedBlockingPartitions)
      .map(id => ShuffleBlockInfo(id.shuffleId, id.producerId))

  override def getMigrationBlocks(info: ShuffleBlockInfo): List[(BlockId, ManagedBuffer)] =
    startedEnvironment().flatMap(_.exportBlockingPartition(ResultPartitionID(info.shuffleId, info.mapId))) match {
      case Some(export) =>
        List(
          ShuffleIndexBlockId(info.shuffleId, info.mapId, ReduceId) -> new NioManagedBuffer(ByteBuffer.wrap(export.index)),
          ShuffleDataBlockId(info.shuffleId, info.mapId, ReduceId) ->
            new FileSegmentManagedBuffer(transportConf(), export.file, 0L, export.length))
      case None => Nil // released meanwhile (its shuffle was unregistered): nothing to move
    }

  // ---- Spark's fallback storage (no peer took the map output) ----------------------------------------

  /** A directory that does not exist: what [[getIndexFile]] answers lies in it. */
  private val nowhere = new File(System.getProperty("java.io.tmpdir"), s"sluice-nowhere-${java.util.UUID.randomUUID()}")

  /**
   * Copies finished partition `id` to the fallback storage and has the driver point its map output
   * there; a copy the driver does not want (the shuffle is gone) or cannot be told of is deleted.
   * An IOException when the copy or the driver fails (Spark's decommissioner then retries or gives
   * up, and the map output stays where it was).
   */
  private def copyToFallbackStorage(f: FallbackTarget, id: ResultPartitionID): Unit =
    startedEnvironment().flatMap(_.exportBlockingPartition(id)) match {
      case None => logInfo(s"Map output $id is not here (any more): nothing to copy to the fallback storage")
      case Some(exported) =>
        val storage = f.storage()
        storage.copy(id, exported)
        val known =
          try f.relocate(id)
          catch {
            case NonFatal(e) =>
              storage.delete(id)
              throw new IOException(s"Could not point the map output $id at the fallback storage on the driver", e)
          }
        if (known) logInfo(s"Copied map output $id (${exported.length} bytes) to ${storage.dataPath(id)}")
        else {
          storage.delete(id)
          logInfo(s"Dropped the fallback storage's copy of $id: the driver no longer knows shuffle ${id.shuffleId}")
        }
    }

  // ---- receiving (a peer) ------------------------------------------------------------------------

  override def putShuffleBlockAsStream(blockId: BlockId, serializerManager: SerializerManager): StreamCallbackWithID =
    blockId match {
      case ShuffleIndexBlockId(shuffleId, mapId, _) => new IndexReceiver(blockId, ResultPartitionID(shuffleId, mapId))
      case ShuffleDataBlockId(shuffleId, mapId, _) =>
        val env = environment()
        maxDiskSize.foreach { max =>
          val used = env.finishedBlockingPartitionBytes
          if (used > max) {
            throw new IOException(s"Refusing $blockId: this executor's shuffle files take $used bytes, more than " +
              s"spark.storage.decommission.shuffleBlocks.maxDiskSize ($max)")
          }
        }
        new FileReceiver(blockId, ResultPartitionID(shuffleId, mapId), env)
      case other => throw new UnsupportedOperationException(s"Sluice's block resolver cannot receive $other: " +
          "decommissioning moves a Sluice map output as one .index and one .data block")
    }

  /** Forgets indexes of `shuffleId` still waiting for their file (the shuffle was unregistered). */
  def forgetShuffle(shuffleId: Int): Unit = pendingIndexes.keySet().asScala.filter(_.shuffleId == shuffleId)
    .foreach(pendingIndexes.remove)

  /** Indexes received whose file has not followed yet (tests). */
  def numPendingIndexes: Int = pendingIndexes.size

  override def stop(): Unit = pendingIndexes.clear()

  /** Collects one partition's index in memory; it waits there for the partition's file. */
  private final class IndexReceiver(blockId: BlockId, id: ResultPartitionID) extends StreamCallbackWithID {
    private val bytes = new ByteArrayOutputStream()

    override def getID: String = blockId.name

    override def onData(streamId: String, buf: ByteBuffer): Unit = {
      if (bytes.size().toLong + buf.remaining() > MaxIndexBytes) {
        throw new IOException(s"$blockId is larger than a Sluice partition index can be ($MaxIndexBytes bytes)")
      }
      if (buf.hasArray) {
        bytes.write(buf.array(), buf.arrayOffset() + buf.position(), buf.remaining())
        buf.position(buf.limit())
      } else {
        val chunk = new Array[Byte](buf.remaining())
        buf.get(chunk)
        bytes.write(chunk)
      }
    }

    override def onComplete(streamId: String): Unit = pendingIndexes.put(id, bytes.toByteArray)

    override def onFailure(streamId: String, cause: Throwable): Unit = ()
  }

  /** Writes one partition's file into a local dir; once complete, the partition is adopted and relocated. */
  private final class FileReceiver(blockId: BlockId, id: ResultPartitionID, env: ShuffleEnvironment)
    extends StreamCallbackWithID {

    private val file: File = env.newMigratedPartitionFile(id)
    private val channel = FileChannel.open(file.toPath, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)
    private var received = 0L

    override def getID: String = blockId.name

    override def onData(streamId: String, buf: ByteBuffer): Unit =
      while (buf.hasRemaining) received += channel.write(buf)

    override def onComplete(streamId: String): Unit = {
      try channel.close()
      catch { case e: IOException => file.delete(); throw e }
      val index = pendingIndexes.remove(id)
      if (index == null) {
        file.delete()
        throw new IOException(s"$blockId arrived without its index (${ShuffleIndexBlockId(id.shuffleId, id.producerId,
            ReduceId).name} must come first)")
      }
      val adopted = env.adoptBlockingPartition(id, file, index) // deletes the file when it fails
      val known =
        try relocate(id, env.serverPort)
        catch {
          case NonFatal(e) =>
            // The map output may still point at the sender: drop the copy, the sender tries again.
            if (adopted) env.partitionManager.releasePartition(id, null)
            throw new IOException(s"Could not move the map output of $blockId to this executor on the driver", e)
        }
      if (!known) {
        if (adopted) env.partitionManager.releasePartition(id, null)
        logInfo(s"Dropped migrated $blockId: the driver no longer knows shuffle ${id.shuffleId}")
      } else {
        logInfo(s"Adopted migrated map output $id ($received bytes${if (adopted) "" else ", already held here"})")
      }
    }

    override def onFailure(streamId: String, cause: Throwable): Unit = {
      try channel.close()
      catch { case NonFatal(_) => }
      file.delete()
      logWarning(s"Receiving migrated $blockId failed; its partial file was deleted", cause)
    }
  }
}

private[sluice] object SluiceShuffleBlockResolver {

  /** The reduce id in the names of migration blocks (Spark's NOOP_REDUCE_ID: one block per map output). */
  val ReduceId = 0

  /**
   * Where a decommissioning executor's map outputs go when Spark puts them in its fallback storage:
   * the storage (made on first use) and how the driver learns it (false: it no longer knows the
   * shuffle).
   */
  final case class FallbackTarget(storage: () => SluiceFallbackStorage, relocate: ResultPartitionID => Boolean)

  /** A sanity bound on a received index: about 20 bytes per stored buffer, so ~400 GB of 32 KiB buffers. */
  private val MaxIndexBytes = 256L << 20
}
