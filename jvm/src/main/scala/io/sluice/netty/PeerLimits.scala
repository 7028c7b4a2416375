package io.sluice.netty

import java.net.{InetAddress, InetSocketAddress, SocketAddress}
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.{AtomicInteger, AtomicLong}

import io.sluice.config.SluiceOptions
import org.slf4j.LoggerFactory

/**
 * What one remote host (a peer, known by its IP address) may hold on this executor's Sluice
 * server: at most `maxConnections` TCP connections (counted as they are accepted, before any
 * authentication or TLS handshake) and at most `maxReaders` partition readers over all of them
 * (spark.sluice.network.maxConnectionsPerPeer / maxReadersPerPeer). Without spark.authenticate
 * anyone who reaches the port may ask for any partition; these bound what one host can pin (file
 * handles, reader state) however many connections it opens. A real executor holds one connection
 * to each server and as many readers as its reduce tasks have channels in flight, far below both.
 *
 * Connections are counted under the map's per-key lock (they come and go rarely); readers with a
 * compare-and-set (one per partition request). A peer's entry goes when it holds nothing.
 * Thread-safe.
 */
private[netty] final class PeerLimits(val maxConnections: Int, val maxReaders: Int) {

  import PeerLimits._

  private val peers = new ConcurrentHashMap[InetAddress, Peer]()
  private val lastWarningNanos = new AtomicLong(System.nanoTime() - WarningIntervalNanos)
  private val refusedSinceWarning = new AtomicInteger

  /**
   * Counts a connection accepted from `remote`: its peer, or null (nothing counted) when the peer
   * already holds `maxConnections`. Addresses that are not IP addresses have no limit (Unlimited).
   */
  def tryConnect(remote: SocketAddress): Peer = remote match {
    case a: InetSocketAddress if a.getAddress != null =>
      var admitted: Peer = null
      peers.compute(a.getAddress,
        (address, existing) => {
          val peer = if (existing == null) new Peer(address, this) else existing
          if (peer.connections < maxConnections) {
            peer.connections += 1
            admitted = peer
          }
          if (peer.isIdle) null else peer
        })
      if (admitted == null) refused(a.getAddress)
      admitted
    case _ => Unlimited
  }

  private[netty] def disconnect(peer: Peer): Unit = if (peer.limits eq this) {
    peers.compute(peer.address,
      (_, existing) => {
        if (existing eq peer) peer.connections -= 1
        if (existing == null || existing.isIdle) null else existing
      })
  }

  private[netty] def readerGone(peer: Peer): Unit =
    if (peer.readerCount.decrementAndGet() == 0 && peer.connections == 0) {
      peers.computeIfPresent(peer.address, (_, existing) => if (existing.isIdle) null else existing)
    }

  /** Connections `address` holds now (tests, diagnostics). */
  def connectionsOf(address: InetAddress): Int = Option(peers.get(address)).fold(0)(_.connections)

  /** Readers `address` holds now (tests, diagnostics). */
  def readersOf(address: InetAddress): Int = Option(peers.get(address)).fold(0)(_.readerCount.get)

  /** Peers holding anything now. */
  def numPeers: Int = peers.size

  /** A warning at most every ten seconds, however fast a host keeps trying. */
  private def refused(address: InetAddress): Unit = {
    val n = refusedSinceWarning.incrementAndGet()
    val now = System.nanoTime()
    val last = lastWarningNanos.get()
    if (now - last >= WarningIntervalNanos && lastWarningNanos.compareAndSet(last, now)) {
      refusedSinceWarning.addAndGet(-n)
      log.warn(s"Refused a connection from ${address.getHostAddress}: it already holds $maxConnections connections " +
        s"to this executor's Sluice server (${SluiceOptions.MaxConnectionsPerPeer.key}=$maxConnections)" +
        (if (n > 1) s"; ${n - 1} more connections were refused since the last warning" else ""))
    }
  }
}

private[netty] object PeerLimits {
  private val log = LoggerFactory.getLogger(classOf[PeerLimits])
  private val WarningIntervalNanos = 10L * 1000 * 1000 * 1000

  /** One remote host's share of the server. `connections` is only changed under the map's lock. */
  final class Peer private[PeerLimits] (val address: InetAddress, private[PeerLimits] val limits: PeerLimits) {
    @volatile private[netty] var connections = 0
    private[netty] val readerCount = new AtomicInteger

    private[PeerLimits] def isIdle: Boolean = connections == 0 && readerCount.get == 0

    /** Counts one more reader; false (nothing counted) when the peer holds its maximum already. */
    def tryAddReader(): Boolean = {
      if (limits == null) return true
      var n = readerCount.get
      while (n < limits.maxReaders) {
        if (readerCount.compareAndSet(n, n + 1)) return true
        n = readerCount.get
      }
      false
    }

    /** One reader counted by [[tryAddReader]] is gone. */
    def removeReader(): Unit = if (limits != null) limits.readerGone(this)

    /** Why a request beyond the limit is refused, naming the host and the key. */
    def readerLimitMessage: String =
      s"Refused a partition request from ${address.getHostAddress}: it already holds ${limits.maxReaders} readers on " +
        s"this executor's Sluice server (${SluiceOptions.MaxReadersPerPeer.key}=${limits.maxReaders})"

    override def toString: String = s"Peer(${address.getHostAddress}, $connections connections, ${readerCount.get} readers)"
  }

  /** The peer of a connection whose address is not an IP address: counted nowhere. */
  val Unlimited: Peer = new Peer(InetAddress.getLoopbackAddress, null)
}
