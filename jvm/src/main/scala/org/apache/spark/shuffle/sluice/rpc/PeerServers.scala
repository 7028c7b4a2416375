package org.apache.spark.shuffle.sluice.rpc

import scala.collection.mutable

import io.sluice.NodeServiceAddress
import org.apache.spark.shuffle.sluice.rpc.SluiceMessages.{ReadServer, SluiceServer}

/**
 * The driver's list of where each executor's map outputs are read, as the executors' reports
 * announce it, from which each executor learns the servers its readers will read from and connects
 * to them before its first reduce task does: an executor's own Sluice server, or the node shuffle
 * service that serves its map outputs (then no reader connects to the executor for them, unless
 * the application also runs pipelined shuffles, whose partitions stay on their executors). An
 * answer names the servers of the executors that announced theirs after the asking one (the list
 * read as a ring), up to `maxPeers` distinct servers, so every server is named to about as many
 * executors as an answer names, however many executors there are; the rest connect when a reduce
 * task's gate names them. Called by the driver plugin's report handler (Spark's RPC threads);
 * thread-safe.
 *
 * @param maxPeers  the most servers one answer names
 * @param pipelined the application runs Sluice's pipelined shuffles: executors' own servers are
 *                  named even where a node service serves their blocking outputs
 */
private[sluice] final class PeerServers(maxPeers: Int = PeerServers.MaxPeers, pipelined: Boolean = false) {

  private val servers = mutable.LinkedHashMap.empty[String, Seq[ReadServer]] // executor -> where it is read; guarded by this

  /**
   * Records where `server`'s executor is read (`nodeService`, when one serves its map outputs),
   * then names up to `maxPeers` servers other executors among `live` are read from.
   */
  def announce(server: Option[SluiceServer], nodeService: Option[NodeServiceAddress], executorId: String,
      live: Set[String]): Seq[ReadServer] =
    synchronized {
      server.foreach(s => servers(s.executorId) = readFrom(s, nodeService))
      servers.filterInPlace((id, _) => live.contains(id) || id == executorId)
      val all = servers.toIndexedSeq
      val own = all.indexWhere(_._1 == executorId) // -1 (not announced yet): from the first
      (1 to all.size).iterator.map(i => all((own + i) % all.size)).filter(_._1 != executorId).flatMap(_._2).distinct
        .take(maxPeers).toSeq
    }

  private def readFrom(server: SluiceServer, nodeService: Option[NodeServiceAddress]): Seq[ReadServer] = {
    val own = ReadServer(server.host, server.port)
    nodeService match {
      case Some(n) => ReadServer(n.host, n.port, node = true) +: (if (pipelined) Seq(own) else Nil)
      case None => Seq(own)
    }
  }

  def size: Int = synchronized(servers.size)
}

private[sluice] object PeerServers {

  /** As many as the executor's client prepares connections for (PartitionRequestClientFactory). */
  val MaxPeers: Int = io.sluice.netty.PartitionRequestClientFactory.MaxPreparedConnections
}
