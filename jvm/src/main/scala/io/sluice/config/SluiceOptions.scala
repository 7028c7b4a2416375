package io.sluice.config

import io.sluice.config.ConfigOption._
import io.sluice.config.ConfigType._

/**
 * Every `spark.sluice.*` setting, defined once. `docs/configuration.md`, the Python option table
 * and `conf/sluice.conf.template` are generated from [[all]] (see [[ConfigDocs]]); a test fails
 * when they drift apart.
 */
object SluiceOptions {

  private def opt[T](key: String, py: String, tpe: ConfigType[T], default: T, flink: String,
      effect: String, bounds: Bounds = Bounds.none)(doc: String): ConfigOption[T] =
    ConfigOption.define(key, py, tpe, default, flink, effect, bounds)(doc)

  // ---- memory -------------------------------------------------------------------------------

  val SegmentSize: ConfigOption[Long] = opt("spark.sluice.memory.segmentSize", "segment_size", BytesType,
    32L << 10, "taskmanager.memory.segment-size", Effect.ExecutorStart,
    Bounds(Some(4096L), Some(16L << 20), powerOfTwo = true)) {
    """Size of one network buffer (memory segment). Records are serialised into buffers of this
      |size; a buffer is the unit of flushing, of credit and of transfer."""
  }

  val NetworkMemory: ConfigOption[Long] = opt("spark.sluice.network.memory", "network_memory", BytesType,
    64L << 20, "taskmanager.memory.network.min / max", Effect.ExecutorStart,
    atLeast(64L << 10)) {
    """Off-heap memory per executor for network buffers (the NetworkBufferPool): the sum of every
      |result partition's and input gate's buffers. Segments are allocated on first use and reused.
      |Blocking shuffles larger than this spill to Spark's local dirs; nothing ever exceeds it. An
      |executor refuses to start when, less readMemory, it holds fewer segments than its task
      |slots need to make progress at once: two per slot, plus a starting input gate's two scratch
      |segments and buffersPerChannel exclusive ones."""
  }

  val SortBufferSize: ConfigOption[Long] = opt("spark.sluice.memory.sortBufferSize", "sort_buffer_size", BytesType,
    16L << 20, "taskmanager.network.sort-shuffle.min-buffers", Effect.TaskStart,
    between(4096L, 1L << 30)) {
    """The most network memory one map task's sort buffer takes from the executor's pool (blocking
      |shuffles are written sort-merge: the records are collected in this buffer and spilled,
      |grouped by reduce partition, when it is full). It gets its fair share of the pool up to
      |this, and at least one segment; larger means fewer, longer regions in the partition file.
      |While its share holds two segments per reduce partition, each reduce partition fills
      |segments of its own, written out as they are; with more reduce partitions they share
      |segments, sorted apart when spilled."""
  }

  val RecordSpillThreshold: ConfigOption[Long] = opt("spark.sluice.memory.recordSpillThreshold",
    "record_spill_threshold", BytesType, 5L << 20,
    "(none: Flink's SpillingAdaptiveSpanningRecordDeserializer spills records above 5 MiB)", Effect.TaskStart,
    atLeast(64L << 10)) {
    """A record that spans network buffers is gathered in the reduce task's heap while its buffers
      |arrive; one larger than this, or one that would take the records a task is gathering at once
      |beyond this together, is gathered in a file in Spark's local dirs instead (deleted when read),
      |so a task's heap for partial records stays within this however many executors it reads
      |records from at once."""
  }

  val BuffersPerChannel: ConfigOption[Int] = opt("spark.sluice.network.buffersPerChannel",
    "buffers_per_channel", IntType, 2, "taskmanager.network.memory.buffers-per-channel",
    Effect.TaskStart, between(1, 1024)) {
    """Exclusive buffers of each remote input channel, announced to the sender as the initial
      |credit. Raise it when the credit round trip is long compared to the time to fill a buffer."""
  }

  val FloatingBuffersPerGate: ConfigOption[Int] = opt("spark.sluice.network.floatingBuffersPerGate",
    "floating_buffers_per_gate", IntType, 8, "taskmanager.network.memory.floating-buffers-per-gate",
    Effect.TaskStart, between(0, 65536)) {
    """Floating buffers of each input gate, shared by its channels and handed out by backlog.
      |Also the number of buffers each pipelined result partition may use beyond buffersPerChannel per
      |subpartition. With few channels carrying much data, raising it (with maxBuffersPerSubpartition)
      |lets more buffers be in flight: faster, but more is queued under backpressure."""
  }

  val MaxCreditWindow: ConfigOption[Int] = opt("spark.sluice.network.maxCreditWindow",
    "max_credit_window", IntType, 64,
    "(none: Flink's window is buffers-per-channel plus the backlog, up to floating-buffers-per-gate)",
    Effect.TaskStart, between(1, 65536)) {
    """Most buffers one remote input channel may hold for its sender, free or unread (its credit
      |window). A window starts at buffersPerChannel + floatingBuffersPerGate, as in Flink (a regular
      |shuffle's channel at buffersPerChannel plus its share of the gate's floating pool when that is
      |more: a reducer reading from few executors keeps a deep window), grows by half each time the
      |channel runs dry while its sender has data (a buffer arrives with a backlog behind it and
      |finds the task done with everything before it), and shrinks back to its start while buffers
      |wait for the task, so one channel carrying an executor's data keeps more reads and writes in
      |flight. The buffers come from the gate's floating pool, which may grow to this minus
      |buffersPerChannel and shares the executor's network memory with every other pool. At or
      |below buffersPerChannel + floatingBuffersPerGate the window stays fixed."""
  }

  val MaxChannelsInFlightPerGate: ConfigOption[Int] = opt("spark.sluice.network.maxChannelsInFlightPerGate",
    "max_channels_in_flight_per_gate", IntType, 128, "(none: Spark's spark.reducer.maxReqsInFlight)",
    Effect.TaskStart, between(1, 65536)) {
    """Most channels of one input gate of a regular shuffle that are requested and not yet finished.
      |A regular gate has one channel per executor it reads map outputs from, so this bounds the
      |executors read from at once (each a request its producer's server serves); further channels
      |are requested as earlier ones finish. Pipelined gates request all their channels at once."""
  }

  val MaxRequiredBuffersPerGate: ConfigOption[Int] = opt("spark.sluice.network.maxRequiredBuffersPerGate",
    "max_required_buffers_per_gate", IntType, 16, "taskmanager.network.memory.read-buffer.required-per-gate.max",
    Effect.TaskStart, between(1, 65536)) {
    """Most exclusive buffers one input gate of a regular shuffle takes from the executor's network
      |memory (buffersPerChannel per remote channel in flight; they are required: a gate waits for
      |them). A gate whose channels in flight would need more reads with floating buffers only, as
      |Flink does past the same threshold (FLINK-30473): its remote channels take no exclusive buffer,
      |each keeps one credit from the gate's floating pool while it has data to come and more as its
      |sender's backlog asks, so a gate holds at most this plus maxCreditWindow buffers however many
      |executors it reads from."""
  }

  val MaxBuffersPerSubpartition: ConfigOption[Int] = opt("spark.sluice.network.maxBuffersPerSubpartition",
    "max_buffers_per_subpartition", IntType, 10, "taskmanager.network.memory.max-buffers-per-channel",
    Effect.TaskStart, between(1, 65536)) {
    """Most buffers one pipelined subpartition may hold before its producer waits, so one slow
      |channel cannot take a result partition's whole pool (skew)."""
  }

  val RequestBufferTimeout: ConfigOption[Long] = opt("spark.sluice.network.bufferRequestTimeout",
    "buffer_request_timeout", DurationMsType, 300000L,
    "taskmanager.network.memory.exclusive-buffers-request-timeout-ms", Effect.TaskStart,
    atLeast(1L)) {
    """Longest a task waits for a network buffer (a producer backpressured by its consumers, or a
      |gate waiting for its exclusive buffers) before it fails with an error naming the pool."""
  }

  // ---- output: flushing ---------------------------------------------------------------------

  val BufferTimeout: ConfigOption[Long] = opt("spark.sluice.bufferTimeout", "buffer_timeout", DurationMsType,
    100L, "execution.buffer-timeout", Effect.TaskStart, atLeast(-1L)) {
    """How long a record may wait in a partly filled buffer of a pipelined partition before the
      |output flusher makes it available: 0 flushes after every record, -1 only when a buffer is
      |full. Blocking partitions are consumed when complete and ignore it."""
  }

  val IdleFlushInterval: ConfigOption[Long] = opt("spark.sluice.idleFlushInterval", "idle_flush_interval",
    DurationMsType, 1L, "(none: a Sluice extension)", Effect.TaskStart, atLeast(-1L)) {
    """When the reader of a pipelined subpartition has taken everything readable (the consumer, or
      |the network with credit to spare, is idle), the next record is flushed at once instead of
      |waiting for the buffer timeout, at most once per this interval; a record that comes inside
      |the interval is flushed when the interval ends (with a buffer timeout longer than the
      |interval; otherwise the buffer timeout comes as soon). Under load the reader is
      |never idle and buffers fill as usual, so this only cuts latency at low load. -1 turns it off
      |(records then wait for the buffer timeout, as in Flink); it is off when bufferTimeout is -1."""
  }

  // ---- transport ----------------------------------------------------------------------------

  val CreditBased: ConfigOption[Boolean] = opt("spark.sluice.network.creditBased", "credit_based",
    BooleanType, true, "taskmanager.network.credit-model", Effect.TaskStart) {
    """Credit-based flow control: a sender only sends a buffer the receiver has announced room for,
      |so a slow channel never blocks the others on the shared TCP connection. false switches to
      |the credit-less mode: a shared receive pool, and reading the whole connection stops when it
      |is empty."""
  }

  val Port: ConfigOption[Int] = opt("spark.sluice.network.port", "port", IntType, 0,
    "taskmanager.data.port", Effect.ExecutorStart, between(0, 65535)) {
    """Port of the executor's Sluice server; 0 picks a free one (the port travels in MapStatus). A
      |non-zero port is a base: when it is in use the server tries the next ports, up to
      |spark.port.maxRetries more (Spark's default 16), as Spark's own services do, so several
      |executors on one host (YARN, standalone workers) share one known range."""
  }

  val ServerThreads: ConfigOption[Int] = opt("spark.sluice.network.serverThreads", "server_threads",
    IntType, 0, "taskmanager.network.netty.server.numThreads", Effect.ExecutorStart,
    between(0, 256)) {
    """Netty event-loop threads serving partition requests; 0 means the executor's cores (at most 8)."""
  }

  val ClientThreads: ConfigOption[Int] = opt("spark.sluice.network.clientThreads", "client_threads",
    IntType, 0, "taskmanager.network.netty.client.numThreads", Effect.ExecutorStart,
    between(0, 256)) {
    """Netty event-loop threads receiving buffers; 0 means the executor's cores (at most 8)."""
  }

  val ConnectTimeout: ConfigOption[Long] = opt("spark.sluice.network.connectTimeout", "connect_timeout",
    DurationMsType, 0L, "taskmanager.network.netty.client.connectTimeoutSec", Effect.ExecutorStart,
    atLeast(0L)) {
    """Longest wait to open (and authenticate) the connection to another executor's Sluice server.
      |0 follows spark.network.timeout (as Spark's own spark.shuffle.io.connectionTimeout does)."""
  }

  val RequestTimeout: ConfigOption[Long] = opt("spark.sluice.network.requestTimeout", "request_timeout",
    DurationMsType, 120000L, "taskmanager.network.request-backoff.max", Effect.TaskStart,
    atLeast(1L)) {
    """Longest a consumer waits for data from a channel that sends nothing at all (no buffer, no
      |end of partition, no error) before it fails naming the executor and partition."""
  }

  val HeartbeatTimeout: ConfigOption[Long] = opt("spark.sluice.network.heartbeatTimeout", "heartbeat_timeout",
    DurationMsType, 0L, "(none: Flink relies on the JobManager's heartbeat, heartbeat.timeout)", Effect.ExecutorStart,
    atLeast(0L)) {
    """How long a connection that is reading shuffle data may stay completely silent (no data, no
      |answer to Sluice's heartbeat) before its peer is declared hung and its channels fail, so Spark
      |recomputes the peer's map outputs. 0 follows spark.network.timeout."""
  }

  val MaxFrameLength: ConfigOption[Long] = opt("spark.sluice.network.maxFrameLength", "max_frame_length",
    BytesType, 1L << 20, "(none: Flink bounds frames by the segment size)", Effect.ExecutorStart,
    between(1024L, 1L << 30)) {
    """Largest wire frame accepted. Must be at least the segment size plus 9513 bytes (the frame
      |header and the largest packed frame's entry table, encrypted). A reducer splits the map
      |outputs it reads from one executor over as many requests as this allows (20 bytes each); a
      |longer request or data frame fails its channel, any other oversized frame the connection."""
  }

  val MaxConnectionsPerPeer: ConfigOption[Int] = opt("spark.sluice.network.maxConnectionsPerPeer",
    "max_connections_per_peer", IntType, 128, "(none: a Sluice extension)", Effect.ExecutorStart,
    between(1, 65536)) {
    """Most TCP connections one remote host (by IP address) may hold open to an executor's Sluice
      |server, authenticated or not; further ones are closed as they arrive and the executor logs a
      |warning naming the host and this key. Every executor keeps exactly one connection to each
      |other executor, so a host needs one per executor it runs."""
  }

  val MaxReadersPerPeer: ConfigOption[Int] = opt("spark.sluice.network.maxReadersPerPeer",
    "max_readers_per_peer", IntType, 32768, "(none: a Sluice extension)", Effect.ExecutorStart,
    between(1, 1 << 20)) {
    """Most partition readers one remote host (by IP address) may hold at once on an executor's
      |Sluice server, over all its connections; a request beyond it fails with an error naming the
      |host and this key (the reading task fails and Spark retries it; the map outputs are not
      |declared lost). A host's readers are
      |at most its running reduce tasks' gates (one reader each per regular shuffle read) or those
      |times this executor's producers (pipelined shuffles)."""
  }

  val MaxOpenPartitionFiles: ConfigOption[Int] = opt("spark.sluice.network.maxOpenPartitionFiles",
    "max_open_partition_files", IntType, 4096, "(none: a Sluice extension)", Effect.ExecutorStart,
    between(0, 1 << 20)) {
    """Most finished map-output files an executor's Sluice server keeps open between the reduce
      |tasks that read them, and at most as many as hold a quarter of the executor's open-file limit
      |(ulimit -n) in descriptors, two per file (its data and its index; the executor's metric
      |partitionFileDescriptors counts those open):
      |each kept file is opened once for many readers instead of once per reader (a job of 1500
      |maps and 400 reducers otherwise opens and closes files 600,000 times). Beyond it, files are
      |opened for each reader. A file is closed about a second after its last reader came, and at
      |once when its shuffle is released, so an idle executor holds none open. 0 opens a file for
      |every reader."""
  }

  val IndexCacheSize: ConfigOption[Long] = opt("spark.sluice.network.indexCacheSize", "index_cache_size", BytesType,
    32L << 20, "spark.shuffle.service.index.cache.size (Spark's external shuffle service)", Effect.ExecutorStart,
    between(0L, 1L << 40)) {
    """Heap an executor gives to the index files of its finished map outputs, so that each index
      |file is read once per executor rather than once per reduce task (the writer leaves the index
      |it just wrote there). Every reduce task reads its range of every map output's index: a job of
      |1500 maps and 400 reducers otherwise opens and reads index files 600,000 times. An index
      |larger than an eighth of it is read from its file for each reader, as are indexes that
      |do not fit while the ones kept are being read: each such reader reads only its own range.
      |0 reads every index from its file."""
  }

  val ReadThreads: ConfigOption[Int] = opt("spark.sluice.network.readThreads", "read_threads", IntType, 0,
    "(none: Flink reads sort-merge files on the TaskManager's I/O executor, FLINK-19582)", Effect.ExecutorStart,
    between(0, 256)) {
    """Most threads per executor that read finished map-output files for remote reduce tasks: they
      |open the files and read the stored buffers of each frame, so that Netty's event loops only
      |write finished frames and never wait on a disk. A thread starts only while reads wait for
      |one and ends after a minute without work. 0 means the executor's cores, at least 2 and at
      |most 32: a read served from the page cache is a memory copy that keeps a core busy. Raise it
      |when the map outputs are on disks that need many reads in flight to reach their speed
      |(NVMe drives, several local dirs on separate disks) and the reduce side waits for data."""
  }

  val ReadMemory: ConfigOption[Long] = opt("spark.sluice.network.readMemory", "read_memory", BytesType, 0L,
    "taskmanager.memory.framework.off-heap.batch-shuffle.size", Effect.ExecutorStart, between(0L, 1L << 40)) {
    """The part of spark.sluice.network.memory the executor's Sluice server reads map-output files
      |into for remote reduce tasks: each frame read ahead of its sending takes one segment of it
      |until it is written to the network. Reads wait while it is all in use (backpressure, not an
      |error), so it bounds the server's read-ahead whatever the number of readers, and no reader
      |ever waits for the task side's buffers nor they for it. 0 means an eighth of
      |spark.sluice.network.memory (8 MiB of the default 64 MiB: 256 frames of 32 KiB, far more
      |than a disk or a network link keeps in flight), at least one segment. The rest of
      |spark.sluice.network.memory, at least two segments, is for result partitions and input
      |gates."""
  }

  // ---- observability ------------------------------------------------------------------------

  val MetricsInterval: ConfigOption[Long] = opt("spark.sluice.metrics.reportInterval", "metrics_report_interval",
    DurationMsType, 1000L, "metrics.reporter.<name>.interval", Effect.ExecutorStart,
    atLeast(10L)) {
    """How often executors send their network-metric snapshots to the driver (the Sluice tab,
      |sluice.metrics) and refresh the ...PerSecond rates."""
  }

  val LatencyTrackingInterval: ConfigOption[Long] = opt("spark.sluice.latencyTracking.interval",
    "latency_tracking_interval", DurationMsType, 0L, "metrics.latency.interval", Effect.TaskStart,
    atLeast(0L)) {
    """How often each producer emits a latency marker through its buffers; consumers record how
      |long markers took. 0 turns latency tracking off (markers cost). One job can switch it on with a
      |local property of the same key (sc.setLocalProperty)."""
  }

  val LatencyTrackingGranularity: ConfigOption[String] = opt("spark.sluice.latencyTracking.granularity",
    "latency_tracking_granularity", EnumType(Seq("single", "operator", "subtask")), "operator",
    "metrics.latency.granularity", Effect.TaskStart) {
    """One latency histogram per consumer task (single), per producer stage and consumer task
      |(operator), or per producer task and consumer task (subtask: quadratic in the parallelism).
      |A local property of the same key overrides it for one job."""
  }

  val BackpressureNumSamples: ConfigOption[Int] = opt("spark.sluice.backpressure.numSamples",
    "backpressure_num_samples", IntType, 100, "web.backpressure.num-samples", Effect.OnRequest,
    between(1, 10000)) {
    """Stack-trace samples the backpressure monitor takes of each task of a stage."""
  }

  val BackpressureDelay: ConfigOption[Long] = opt("spark.sluice.backpressure.delayBetweenSamples",
    "backpressure_delay_between_samples", DurationMsType, 50L, "web.backpressure.delay-between-samples",
    Effect.OnRequest, atLeast(1L)) {
    """Pause between two stack-trace samples of the backpressure monitor."""
  }

  val BackpressureRefreshInterval: ConfigOption[Long] = opt("spark.sluice.backpressure.refreshInterval",
    "backpressure_refresh_interval", DurationMsType, 60000L, "web.backpressure.refresh-interval",
    Effect.OnRequest, atLeast(0L)) {
    """How long a stage's backpressure sample stays fresh before a new request samples again."""
  }

  /** Every definition, in the order the docs list them. */
  val all: Seq[ConfigOption[_]] = Seq(
    SegmentSize, NetworkMemory, SortBufferSize, RecordSpillThreshold, BuffersPerChannel, FloatingBuffersPerGate,
    MaxCreditWindow, MaxChannelsInFlightPerGate, MaxRequiredBuffersPerGate,
    MaxBuffersPerSubpartition,
    RequestBufferTimeout, BufferTimeout, IdleFlushInterval, CreditBased, Port, ServerThreads, ClientThreads, ConnectTimeout,
    RequestTimeout, HeartbeatTimeout, MaxFrameLength, MaxConnectionsPerPeer, MaxReadersPerPeer, MaxOpenPartitionFiles,
    IndexCacheSize, ReadThreads, ReadMemory,
    MetricsInterval, LatencyTrackingInterval, LatencyTrackingGranularity,
    BackpressureNumSamples, BackpressureDelay, BackpressureRefreshInterval) ++ ServiceOptions.all

  val byKey: Map[String, ConfigOption[_]] = all.map(o => o.key -> o).toMap
}
