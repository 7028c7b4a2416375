package org.apache.spark.shuffle.sluice

import org.apache.spark.network.buffer.ManagedBuffer
import org.apache.spark.network.shuffle.MergedBlockMeta
import org.apache.spark.shuffle.ShuffleBlockResolver
import org.apache.spark.storage.{BlockId, ShuffleMergedBlockId}

/**
 * Spark asks a BlockingShuffleManager for a block resolver, but Sluice's shuffle data never lives
 * in Spark's BlockManager: readers fetch it over Sluice's own transport. Block lookups therefore
 * fail with a message that says so (push-based merge and block-manager decommissioning of shuffle
 * files are not supported).
 */
private[sluice] final class SluiceShuffleBlockResolver extends ShuffleBlockResolver {

  private def unsupported(what: String): Nothing = throw new UnsupportedOperationException(
    s"$what: Sluice serves shuffle data over its own transport, not through Spark's BlockManager")

  override def getBlockData(blockId: BlockId, dirs: Option[Array[String]]): ManagedBuffer =
    unsupported(s"getBlockData($blockId)")

  override def getMergedBlockData(blockId: ShuffleMergedBlockId, dirs: Option[Array[String]]): Seq[ManagedBuffer] =
    unsupported(s"getMergedBlockData($blockId) (push-based shuffle)")

  override def getMergedBlockMeta(blockId: ShuffleMergedBlockId, dirs: Option[Array[String]]): MergedBlockMeta =
    unsupported(s"getMergedBlockMeta($blockId) (push-based shuffle)")

  override def stop(): Unit = ()
}
