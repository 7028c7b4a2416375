package org.apache.spark.shuffle.sluice

import io.sluice.{ShuffleEnvironment, TransportSettings}
import io.sluice.buffer.BlockCodec
import io.sluice.config.{SluiceConf, SluiceOptions}
import io.sluice.netty.PortRange
import io.sluice.partition.PartitionedFileCipher
import org.apache.spark.SparkConf
import org.apache.spark.internal.Logging
import org.apache.spark.shuffle.sluice.internal.{SparkInternals, TransportConfOverlay}
import org.apache.spark.shuffle.sluice.rpc.NodeServices
import org.apache.spark.storage.BlockManagerId

/**
 * The executor JVM's single [[ShuffleEnvironment]], started on first use (by Sluice's executor
 * plugin when the executor starts, else by the first map or reduce task that needs it) and
 * stopped with the shuffle managers. A driver that runs no tasks never
 * starts it, so it holds no network buffers. Both Sluice managers share it.
 */
private[sluice] object SluiceEnvironment extends Logging {

  @volatile private var instance: ShuffleEnvironment = _

  def get(): ShuffleEnvironment = {
    val e = instance
    if (e != null && !e.isStopped) e
    else synchronized {
      if (instance == null || instance.isStopped) instance = create(SparkInternals.conf)
      instance
    }
  }

  def ifStarted: Option[ShuffleEnvironment] = Option(instance).filterNot(_.isStopped)

  def stop(): Unit = synchronized {
    if (instance != null) {
      instance.shutdown()
      instance = null
    }
  }

  /** Sluice's settings from a Spark configuration; fails naming the key on a bad value. */
  def sluiceConf(conf: SparkConf): SluiceConf = SluiceConf(conf.getAll.toSeq)

  /**
   * The settings the executor's engine runs with: [[sluiceConf]], with what follows Spark's own
   * settings resolved. spark.sluice.network.heartbeatTimeout=0 (the default) becomes
   * spark.network.timeout (Spark's default 120s), so a hung peer fails its readers with a
   * FetchFailedException in the time Spark's own shuffle would take; so does
   * spark.sluice.network.connectTimeout=0 (the default), as Spark's spark.shuffle.io.connectionTimeout
   * follows spark.network.timeout, so a reader does not wait for a hung peer's connection longer
   * than the user allowed.
   */
  def engineConf(conf: SparkConf): SluiceConf = {
    val sluice = sluiceConf(conf)
    val following = Seq(SluiceOptions.HeartbeatTimeout, SluiceOptions.ConnectTimeout).filter(o => sluice.get(o) == 0L)
    if (following.isEmpty) sluice
    else sluice.withSettings(following.map(o => o.key -> s"${networkTimeoutMs(conf)}ms"): _*)
  }

  /**
   * Where the map outputs of blocking partitions `env` writes are read from, for their MapStatus:
   * the node shuffle service the executor registered with, or the executor's own server.
   */
  def blockingOutputLocation(env: ShuffleEnvironment): BlockManagerId = env.nodeService match {
    case Some(n) => SparkInternals.nodeServedLocation(n.host, n.port)
    case None => SparkInternals.mapOutputLocation(env.serverPort)
  }

  /**
   * Whether pipelined shuffle buffers cross the network with a CRC32C: Spark's
   * spark.shuffle.streaming.checksum.enabled (on by default in Spark 4.3, whose built-in streaming
   * shuffle checksums every network buffer under it).
   */
  def checksumsInTransit(conf: SparkConf): Boolean = conf.getBoolean(StreamingChecksumKey, true)

  val StreamingChecksumKey = "spark.shuffle.streaming.checksum.enabled"

  /** spark.network.timeout in milliseconds (Spark's default 120s). */
  def networkTimeoutMs(conf: SparkConf): Long = conf.getTimeAsMs("spark.network.timeout", "120s")

  /** A per-buffer codec factory honouring spark.shuffle.compress and spark.io.compression.codec. */
  def codec(conf: SparkConf): Option[() => BlockCodec] =
    if (!conf.getBoolean("spark.shuffle.compress", true)) None
    else {
      val name = conf.get("spark.io.compression.codec", "lz4")
      val level = conf.getInt("spark.io.compression.zstd.level", 1)
      BlockCodec.forSparkCodec(name, level) // fail early, naming the key, if it is unusable
      Some(() => BlockCodec.forSparkCodec(name, level))
    }

  /**
   * The cipher of blocking partition files: None unless Spark's I/O encryption is on
   * (spark.io.encryption.enabled); else AES/CTR with the application's I/O encryption key, the
   * key and mode Spark's own shuffle and spill files are encrypted with. Fails naming the setting
   * Sluice cannot honour, or when Spark gave no key.
   */
  def fileCipher(conf: SparkConf, key: => Option[Array[Byte]]): Option[PartitionedFileCipher] =
    if (!ioEncryptionEnabled(conf)) None
    else {
      val k = key.getOrElse(throw new IllegalStateException(s"${PartitionedFileCipher.EnabledKey} is true, but Spark " +
          "gave this executor no I/O encryption key"))
      Some(PartitionedFileCipher(k, cipherTransformation(conf)))
    }

  private def ioEncryptionEnabled(conf: SparkConf): Boolean = conf.getBoolean(PartitionedFileCipher.EnabledKey, false)

  private def cipherTransformation(conf: SparkConf): String =
    conf.get(PartitionedFileCipher.TransformationKey, PartitionedFileCipher.Transformation)

  /**
   * How many tasks this executor runs at once, and where that comes from: its cores over
   * spark.task.cpus. The cores are a local master's threads (`local[N]`), else
   * spark.executor.cores, else a `local-cluster[n,cores,mem]` master's, else Spark's default: 1
   * on YARN and Kubernetes, every core of the machine elsewhere (a standalone worker's executor).
   */
  def taskSlots(conf: SparkConf): (Int, String) = {
    val master = conf.get("spark.master", "")
    val machine = Runtime.getRuntime.availableProcessors()
    val (cores, from) = master match {
      case LocalMaster(threads) =>
        (if (threads == null) 1 else if (threads == "*") machine else threads.toInt, s"spark.master=$master")
      case _ if conf.contains(ExecutorCoresKey) =>
        (conf.getInt(ExecutorCoresKey, 1), s"$ExecutorCoresKey=${conf.get(ExecutorCoresKey)}")
      case LocalClusterMaster(c) => (c.toInt, s"spark.master=$master")
      case m if m == "yarn" || m.startsWith("k8s://") => (1, s"$ExecutorCoresKey's default")
      case _ => (machine, s"the executor's $machine cores")
    }
    val cpus = conf.getInt(TaskCpusKey, 1)
    (math.max(1, cores / math.max(1, cpus)), s"$from / $TaskCpusKey=$cpus")
  }

  private val ExecutorCoresKey = "spark.executor.cores"
  private val TaskCpusKey = "spark.task.cpus"
  private val LocalMaster = """local(?:\[\s*(\*|\d+)\s*(?:,\s*\d+\s*)?\])?""".r
  private val LocalClusterMaster = """local-cluster\[\s*\d+\s*,\s*(\d+)\s*,\s*\d+\s*\]""".r

  /**
   * Refuses, before anything starts, network memory too small for the executor's task slots to
   * make progress ([[SluiceConf.checkTaskSlots]]). A local master's gates read no remote channels.
   */
  def checkNetworkMemory(conf: SparkConf, sluice: SluiceConf): Unit = {
    val (slots, from) = taskSlots(conf)
    val local = conf.get("spark.master", "") match {
      case LocalMaster(_) => true
      case _ => false
    }
    sluice.checkTaskSlots(slots, from, compressed = conf.getBoolean("spark.shuffle.compress", true), remoteReads = !local)
  }

  /**
   * Whether readers read the map outputs of other executors on their host from their files
   * (spark.shuffle.readHostLocalDisk, Spark's default true), once the driver names their dirs.
   */
  def readsHostLocalDisk(conf: SparkConf): Boolean = conf.getBoolean(ReadHostLocalDiskKey, true)

  val ReadHostLocalDiskKey = "spark.shuffle.readHostLocalDisk"

  private def create(conf: SparkConf): ShuffleEnvironment = {
    val startNanos = System.nanoTime()
    val sluice = engineConf(conf)
    checkNetworkMemory(conf, sluice)
    val host = SparkInternals.blockManagerId.host
    val cores = conf.getInt("spark.executor.cores", Runtime.getRuntime.availableProcessors())
    val auth = if (SparkInternals.isAuthenticationEnabled) Some((SparkInternals.secretKeyHolder, conf.getAppId)) else None
    val transportConf = TransportConfOverlay(SparkInternals.transportConf(conf, cores), sluice)
    val transport = TransportSettings(transportConf, auth, host, SparkInternals.TransportPipeline,
      conf.getInt(PortRange.MaxRetriesKey, PortRange.DefaultMaxRetries), checksumsInTransit(conf), Some(conf.getAppId))
    val cipher = fileCipher(conf, SparkInternals.ioEncryptionKey)
    val node = NodeServiceRegistration.register(sluice, transportConf, conf.getAppId, SparkInternals.executorId, host,
      SparkInternals.localRootDirs, SparkInternals.localDirs, auth.map(_._1),
      NodeServiceRegistration.Attempts.of(conf), NodeServices.announce)
    val env = new ShuffleEnvironment(sluice, SparkInternals.executorId, node.dirs, codec(conf), transport, cipher,
      node.service, SluiceFallbackStorage(conf), readsHostLocalDisk(conf))
    val tls = transport.transportConf.sslRpcEnabled()
    val security = Seq("authenticated" -> auth.isDefined, "TLS" -> tls).collect { case (what, true) => what }
    val base = sluice.get(SluiceOptions.Port)
    val retried = if (base != 0 && env.serverPort != base) s" (${SluiceOptions.Port.key}=$base in use, retried upward)" else ""
    logInfo(s"Started Sluice's shuffle environment on executor ${SparkInternals.executorId}: server $host:" +
      s"${env.serverPort}$retried${if (security.nonEmpty) security.mkString(" (", ", ", ")") else ""}, " +
      s"${node.service.fold("")(n => s"map outputs served by the node shuffle service at ${n.host}:${n.port}, ")}" +
      s"${cipher.fold("")(c => s"blocking partition files encrypted ($c), ")}${sluice.numberOfSegments} network " +
      s"buffers of ${sluice.segmentSize} bytes, hung peers detected after " +
      s"${sluice.get(SluiceOptions.HeartbeatTimeout)}ms of silence, in ${(System.nanoTime() - startNanos) / 1000000L}ms")
    openDataPlaneWarning(auth.isDefined, host, env.serverPort, sluice).foreach { w =>
      if (!warnedOpenDataPlane) { warnedOpenDataPlane = true; logWarning(w) }
    }
    env
  }

  /** The open-data-plane warning goes out once per executor JVM, however often the environment restarts. */
  @volatile private var warnedOpenDataPlane = false

  /**
   * What an executor says at start-up when spark.authenticate is off: its Sluice server serves any
   * partition to anyone who reaches it, as Spark's own block transfer service does then, within the
   * per-host limits. None when authentication is on.
   */
  def openDataPlaneWarning(authenticated: Boolean, host: String, port: Int, sluice: SluiceConf): Option[String] =
    if (authenticated) None
    else Some(s"spark.authenticate is off: Sluice's shuffle server at $host:$port serves any shuffle partition to " +
      "any client that reaches it, without authentication, as Spark's own block transfer service does then. " +
      s"One remote host may hold at most ${sluice.get(SluiceOptions.MaxConnectionsPerPeer)} connections " +
      s"(${SluiceOptions.MaxConnectionsPerPeer.key}) and ${sluice.get(SluiceOptions.MaxReadersPerPeer)} readers " +
      s"(${SluiceOptions.MaxReadersPerPeer.key}). Where untrusted hosts can reach executors, set " +
      "spark.authenticate=true (and spark.network.crypto.enabled=true or spark.ssl.rpc.enabled=true to encrypt); " +
      "see Sluice's docs/security.md")
}
