package org.apache.spark.shuffle.sluice.internal

/**
 * Every use of a Spark internal ([[SparkApiVisibility]] says which classes and members are) by a
 * Sluice class outside the adapter package `org.apache.spark.shuffle.sluice.internal`, with the
 * reason it is there and not behind [[SparkInternals]]. SparkInternalsCheckSuite fails on a use
 * this list lacks, naming the class, the member and the user, and on an entry nothing uses any
 * more. Mostly the shuffle SPI, which Spark keeps `private[spark]` (so every shuffle plugin lives
 * in a package under `org.apache.spark`), and network-common, on which the engine's transport is
 * built.
 */
object SparkInternalsAllowlist {

  /**
   * Uses of one Spark class or member.
   * @param spark  a Spark class (`org.apache.spark.scheduler.MapStatus`: the class and all its
   *               members) or one member (`org.apache.spark.scheduler.SparkListenerEvent#logEvent$`);
   *               JVM names, nested classes after a `$`
   * @param users  the Sluice classes allowed to use it (a class covers its companion, nested and
   *               anonymous classes), or a package and everything below it (`io.sluice.netty.**`)
   * @param reason why, in one line
   */
  final case class Allowed(spark: String, users: Seq[String], reason: String)

  private val Sluice = "org.apache.spark.shuffle.sluice."
  private def boundary(classes: String*): Seq[String] = classes.map(Sluice + _)

  private val ShuffleSpiUsers = boundary("SluiceShuffleManagerBase", "SluiceShuffleManager", "SluicePipelinedShuffleManager")

  val entries: Seq[Allowed] = Seq(
    // ---- Logging --------------------------------------------------------------------------------
    Seq("Logging", "Logging$LogStringContext", "LogEntry", "LogKey", "MDC", "MessageWithContext").map { c =>
      Allowed(s"org.apache.spark.internal.$c", Seq(Sluice + "**"),
        "Spark's logging (the trait and its structured-logging types), so the boundary logs as Spark does")
    },

    // ---- The shuffle SPI ------------------------------------------------------------------------
    Seq(
      Allowed("org.apache.spark.shuffle.ShuffleManager", boundary("SluiceShuffleManagerBase"),
        "the shuffle manager SPI every shuffle plugin implements"),
      Allowed("org.apache.spark.shuffle.sort.SortShuffleManager", boundary("SluiceShuffleManager"),
        "extends SortShuffleManager: Spark SQL copies every row before a shuffle for any other manager"),
      Allowed("org.apache.spark.shuffle.streaming.StreamingShuffleManager", boundary("SluicePipelinedShuffleManager"),
        "extends StreamingShuffleManager: Spark creates the tracker pipelined shuffles need only for it"),
      Allowed("org.apache.spark.shuffle.ShuffleReader", ShuffleSpiUsers ++ boundary("SluiceShuffleReader"),
        "the SPI's reader, which getReader returns"),
      Allowed("org.apache.spark.shuffle.ShuffleWriter", ShuffleSpiUsers ++ boundary("SluiceShuffleWriter"),
        "the SPI's writer, which getWriter returns"),
      Allowed("org.apache.spark.shuffle.ShuffleReadMetricsReporter",
        ShuffleSpiUsers ++ boundary("SluiceShuffleReader", "SluiceRecordIterator"),
        "the SPI hands the reader the task's read metrics, which Sluice counts into"),
      Allowed("org.apache.spark.shuffle.ShuffleWriteMetricsReporter", ShuffleSpiUsers ++ boundary("SluiceShuffleWriter"),
        "the SPI hands the writer the task's write metrics, which Sluice counts into"),
      Allowed("org.apache.spark.shuffle.BaseShuffleHandle", boundary("SluiceShuffleHandle"),
        "the SPI's handle that carries the ShuffleDependency"),
      Allowed("org.apache.spark.scheduler.MapStatus", boundary("SluiceShuffleWriter"),
        "ShuffleWriter.stop returns the map output's MapStatus (which the adapter builds)"),
      Allowed("org.apache.spark.shuffle.ShuffleBlockResolver", boundary("SluiceShuffleManager"),
        "the SPI's shuffleBlockResolver, which Sluice's resolver replaces"),
      Allowed("org.apache.spark.shuffle.IndexShuffleBlockResolver",
        boundary("SluiceShuffleManager", "SluiceShuffleBlockResolver"),
        "SortShuffleManager's shuffleBlockResolver is an IndexShuffleBlockResolver, so Sluice's extends it"),
      Allowed("org.apache.spark.network.util.TransportConf", boundary("SluiceShuffleManager", "SluiceShuffleBlockResolver"),
        "IndexShuffleBlockResolver serves file segments with the shuffle TransportConf the adapter builds")),
    // What IndexShuffleBlockResolver's methods (blocks, migration, push-based shuffle) take and return.
    Seq("org.apache.spark.network.buffer.ManagedBuffer", "org.apache.spark.network.buffer.FileSegmentManagedBuffer",
      "org.apache.spark.network.buffer.NioManagedBuffer", "org.apache.spark.network.client.StreamCallbackWithID",
      "org.apache.spark.network.shuffle.MergedBlockMeta", "org.apache.spark.serializer.SerializerManager").map { c =>
      Allowed(c, boundary("SluiceShuffleBlockResolver"),
        "in the signatures of the IndexShuffleBlockResolver methods Sluice's resolver overrides (blocks, migration)")
    },

    // ---- Storage plugin and node shuffle service ---------------------------------------------------
    Seq(
      Allowed("org.apache.spark.shuffle.api.ShuffleDataIO", boundary("SluiceShuffleDataIO"),
        "spark.shuffle.sort.io.plugin.class: how a plugin tells Spark its map outputs outlive executors"),
      Allowed("org.apache.spark.shuffle.api.ShuffleDriverComponents",
        boundary("SluiceShuffleDataIO", "SluiceShuffleDriverComponents"),
        "the driver's half of the storage plugin: supportsReliableStorage, removeShuffle, cleanupApplication"),
      Allowed("org.apache.spark.shuffle.api.ShuffleExecutorComponents", boundary("SluiceShuffleDataIO"),
        "the storage plugin must name executor components; Sluice hands Spark's local-disk ones, which it never uses"),
      Allowed("org.apache.spark.shuffle.sort.io.LocalDiskShuffleDataIO", boundary("SluiceShuffleDataIO"),
        "Spark's own executor components, which the sort shuffle would use and Sluice's manager never does"),
      Allowed("org.apache.spark.network.util.TransportConf",
        boundary("NodeServiceRegistration", "SluiceShuffleDriverComponents", "service.ServiceConfiguration",
          "service.SluiceShuffleServiceMain"),
        "executors and the driver speak to node shuffle services over Spark TransportContexts (the adapter builds the conf)"),
      Allowed("org.apache.spark.network.sasl.SecretKeyHolder", boundary("NodeServiceRegistration", "SluiceEnvironment"),
        "the application's secret, from which the node-service key is derived (the adapter hands it over)"),
      Allowed("org.apache.spark.network.util.MapConfigProvider",
        boundary("service.ServiceConfiguration", "service.SluiceShuffleServiceMain"),
        "a node shuffle service builds its TransportConf from its own properties, as Spark's external shuffle service does")),

    // ---- Records ----------------------------------------------------------------------------------
    Seq(
      Allowed("org.apache.spark.sql.catalyst.expressions.UnsafeRow", boundary("SparkRecordSerializer", "SparkRecordDecoder"),
        "SQL shuffles' records are UnsafeRows: Sluice copies their bytes and points rows at them, as UnsafeRowSerializer does"),
      Allowed("org.apache.spark.unsafe.Platform", boundary("SparkRecordSerializer", "SparkRecordDecoder"),
        "Spark's memory copies between rows, byte arrays and network memory"),
      Allowed("org.apache.spark.unsafe.types.UTF8String", boundary("SluiceMetricsDataSource"),
        "DataSource V2's LocalScan returns InternalRows, whose strings are UTF8String")),

    // ---- Listener events, History Server ----------------------------------------------------------
    Seq(
      Allowed("org.apache.spark.scheduler.SparkListenerEvent#logEvent$",
        boundary("SparkListenerSluiceSettings", "SparkListenerSluiceStageMetrics", "SparkListenerSluiceNetworkMemory",
          "SparkListenerSluiceApplicationSummary"),
        "a Scala event class inherits SparkListenerEvent's protected[spark] logEvent through a compiler forwarder"),
      Allowed("org.apache.spark.status.AppHistoryServerPlugin", boundary("ui.SluiceHistoryServerPlugin"),
        "the History Server's plugin SPI, found through META-INF/services"),
      Allowed("org.apache.spark.ui.SparkUI", boundary("ui.SluiceHistoryServerPlugin"),
        "AppHistoryServerPlugin.setupUI hands the UI the tab is attached to (by the adapter)"),
      Allowed("org.apache.spark.status.ElementTrackingStore",
        boundary("ui.SluiceHistoryServerPlugin", "ui.SluiceHistoryListener"),
        "AppHistoryServerPlugin.createListeners hands the store its replay listener fills (through the adapter)"),
      Allowed("org.apache.spark.util.kvstore.KVStore", boundary("ui.ReplayedTabData"),
        "holds the History Server's status store, which it reads through the adapter"),
      Allowed("org.apache.spark.util.kvstore.KVIndex",
        boundary("ui.SluiceStageEntry", "ui.SluiceExecutorMemoryEntry", "ui.SluiceSettingsEntry", "ui.SluiceSummaryEntry"),
        "the status store keys its entries by their @KVIndex field, as Spark's own UI entries are keyed")),

    // ---- The engine's transport -------------------------------------------------------------------
    Seq(
      Allowed("org.apache.spark.network.util.TransportConf", Seq("io.sluice.**", Sluice + "SluiceEnvironment"),
        "the engine's connections are Spark TransportContexts configured by a TransportConf (the adapter builds it)"),
      Allowed("org.apache.spark.network.sasl.SecretKeyHolder", Seq("io.sluice.**"),
        "Spark's shared secret, which the engine's connections authenticate with (the adapter hands it over)"),
      Allowed("org.apache.spark.network.util.MapConfigProvider", Seq("io.sluice.**"),
        "Spark's default TransportConf for engine tools and tests that run without Spark")),
    Seq("TransportContext", "server.TransportServer", "client.TransportClient", "client.TransportClientFactory",
      "client.RpcResponseCallback", "server.RpcHandler",
      "server.NoOpRpcHandler", "server.StreamManager", "buffer.ManagedBuffer", "crypto.AuthClientBootstrap",
      "crypto.AuthServerBootstrap", "server.TransportServerBootstrap").map { c =>
      Allowed(s"org.apache.spark.network.$c", Seq("io.sluice.netty.**"),
        "the engine's server and clients are Spark TransportContexts, for Spark's authentication and TLS")
    },
    Seq("TransportContext", "client.TransportClient", "client.TransportClientFactory", "client.RpcResponseCallback",
      "server.NoOpRpcHandler", "crypto.AuthClientBootstrap").map { c =>
      Allowed(s"org.apache.spark.network.$c", Seq("io.sluice.service.**"),
        "a node shuffle service's control messages are Spark RPCs on its TransportContext, authenticated as Spark's")
    },
    Seq(Allowed("org.apache.spark.unsafe.Platform", Seq("io.sluice.**"),
        "Spark's memory copies between byte arrays and network memory (Flink's MemorySegment does the same)"))).flatten
}
