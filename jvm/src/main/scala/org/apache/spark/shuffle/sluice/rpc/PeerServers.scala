package org.apache.spark.shuffle.sluice.rpc

import scala.collection.mutable

import org.apache.spark.shuffle.sluice.rpc.SluiceMessages.SluiceServer

/**
 * The driver's list of the executors' Sluice servers, as their reports announce them, from which
 * each executor learns its peers and connects to them before its first reduce task reads from them.
 * An answer names the `maxPeers` executors that announced theirs after the asking one (the list
 * read as a ring), so every executor is named to about as many peers as it is named of, however
 * many executors there are; the rest connect when a reduce task's gate names them. Called by the
 * driver plugin's report handler (Spark's RPC threads); thread-safe.
 *
 * @param maxPeers the most servers one answer names
 */
private[sluice] final class PeerServers(maxPeers: Int = PeerServers.MaxPeers) {

  private val servers = mutable.LinkedHashMap.empty[String, SluiceServer] // guarded by this

  /** Records `server`, then names up to `maxPeers` servers of other executors among `live`. */
  def announce(server: Option[SluiceServer], executorId: String, live: Set[String]): Seq[SluiceServer] =
    synchronized {
      server.foreach(s => servers(s.executorId) = s)
      servers.filterInPlace((id, _) => live.contains(id) || id == executorId)
      val all = servers.valuesIterator.toIndexedSeq
      val own = all.indexWhere(_.executorId == executorId) // -1 (not announced yet): from the first
      (1 to all.size).iterator.map(i => all((own + i) % all.size)).filter(_.executorId != executorId).take(maxPeers).toSeq
    }

  def size: Int = synchronized(servers.size)
}

private[sluice] object PeerServers {

  /** As many as the executor's client prepares connections for (PartitionRequestClientFactory). */
  val MaxPeers: Int = io.sluice.netty.PartitionRequestClientFactory.MaxPreparedConnections
}
