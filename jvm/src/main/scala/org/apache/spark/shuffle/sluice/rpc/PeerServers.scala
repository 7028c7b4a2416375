package org.apache.spark.shuffle.sluice.rpc

import scala.collection.mutable

import io.sluice.NodeServiceAddress
import org.apache.spark.shuffle.sluice.rpc.SluiceMessages.{ExecutorDirs, ReadServer, SluiceServer}

/**
 * The driver's list of where each executor's map outputs are read, as the executors' reports
 * announce it, from which each executor learns the servers its readers will read from and connects
 * to them before its first reduce task does: an executor's own Sluice server, or the node shuffle
 * service that serves its map outputs (then no reader connects to the executor for them, unless
 * the application also runs pipelined shuffles, whose partitions stay on their executors). An
 * answer names the servers of the executors that announced theirs after the asking one (the list
 * read as a ring), up to `maxPeers` distinct servers, so every server is named to about as many
 * executors as an answer names, however many executors there are; the rest connect when a reduce
 * task's gate names them. It also keeps the dirs each executor writes its map outputs into, from
 * which an executor learns those of the other executors on its host ([[hostLocal]]). Called by the
 * driver plugin's report handler (Spark's RPC threads); thread-safe.
 *
 * @param maxPeers  the most servers one answer names
 * @param pipelined the application runs Sluice's pipelined shuffles: executors' own servers are
 *                  named even where a node service serves their blocking outputs
 */
private[sluice] final class PeerServers(maxPeers: Int = PeerServers.MaxPeers, pipelined: Boolean = false) {

  private val servers = mutable.LinkedHashMap.empty[String, Seq[ReadServer]] // executor -> where it is read; guarded by this
  private val written = mutable.HashMap.empty[String, PeerServers.Written] // executor -> its host and dirs; guarded by this

  /**
   * Records where `server`'s executor is read (`nodeService`, when one serves its map outputs) and
   * where it writes them (`partitionDirs`), then names up to `maxPeers` servers other executors
   * among `live` are read from.
   */
  def announce(server: Option[SluiceServer], nodeService: Option[NodeServiceAddress], executorId: String,
      live: Set[String], partitionDirs: Seq[String] = Nil): Seq[ReadServer] =
    synchronized {
      server.foreach { s =>
        servers(s.executorId) = readFrom(s, nodeService)
        if (partitionDirs.nonEmpty) written(s.executorId) = PeerServers.Written(s.host, partitionDirs, nodeService.isDefined)
      }
      servers.filterInPlace((id, _) => live.contains(id) || id == executorId)
      written.filterInPlace((id, w) => w.nodeServed || live.contains(id) || id == executorId)
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

  /**
   * The other executors on `executorId`'s host and the dirs they write their map outputs into:
   * the live ones, and those whose outputs a node service keeps after they are gone.
   */
  def hostLocal(executorId: String): Seq[ExecutorDirs] = synchronized {
    written.get(executorId).fold(Seq.empty[ExecutorDirs]) { own =>
      written.iterator.collect { case (id, w) if id != executorId && w.host == own.host => ExecutorDirs(id, w.dirs) }
        .toSeq.sortBy(_.executorId)
    }
  }

  def size: Int = synchronized(servers.size)
}

private[sluice] object PeerServers {

  /** Where an executor writes its map outputs: its host, its dirs there, and whether a node service keeps them. */
  private final case class Written(host: String, dirs: Seq[String], nodeServed: Boolean)

  /** As many as the executor's client prepares connections for (PartitionRequestClientFactory). */
  val MaxPeers: Int = io.sluice.netty.PartitionRequestClientFactory.MaxPreparedConnections
}
