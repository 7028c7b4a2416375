package io.sluice.config

import java.util.Locale

/**
 * Sluice's settings, read from the `spark.sluice.*` entries of a Spark configuration (or any
 * key/value map, in tests). Every key is parsed and validated up front: an unknown key or a bad
 * value fails at once with an error that names the key and the value. Immutable and thread-safe.
 */
final class SluiceConf private (values: Map[String, Any], val raw: Map[String, String]) {

  def get[T](option: ConfigOption[T]): T = values(option.key).asInstanceOf[T]

  /** A copy with some settings changed (tests and benchmarks). */
  def withSettings(settings: (String, String)*): SluiceConf = SluiceConf(raw ++ settings)

  def segmentSize: Int = get(SluiceOptions.SegmentSize).toInt

  /**
   * How many memory segments the executor's network memory holds in all: those of its
   * NetworkBufferPool ([[numberOfPoolSegments]]) and its server's read buffers ([[numberOfReadSegments]]).
   */
  def numberOfSegments: Int = {
    val n = get(SluiceOptions.NetworkMemory) / segmentSize
    require(n >= 3 && n <= Int.MaxValue,
      s"${SluiceOptions.NetworkMemory.key}=${rawOf(SluiceOptions.NetworkMemory)} gives $n segments of " +
        s"$segmentSize bytes; at least 3 are needed")
    n.toInt
  }

  /**
   * The segments the executor's Sluice server reads map-output files into (spark.sluice.network.readMemory;
   * 0: an eighth of the network memory, at least one), taken from the network memory.
   */
  def numberOfReadSegments: Int = {
    val configured = get(SluiceOptions.ReadMemory)
    if (configured == 0) readSegmentsOf(numberOfSegments).toInt
    else {
      val n = configured / segmentSize
      require(n >= 1,
        s"${SluiceOptions.ReadMemory.key}=${rawOf(SluiceOptions.ReadMemory)} is less than one segment " +
          s"(${SluiceOptions.SegmentSize.key}=${rawOf(SluiceOptions.SegmentSize)}): set 0 or at least one segment")
      require(n <= numberOfSegments - 2,
        s"${SluiceOptions.ReadMemory.key}=${rawOf(SluiceOptions.ReadMemory)} leaves " +
          s"${math.max(0L, numberOfSegments - n)} of the ${numberOfSegments} segments of ${SluiceOptions.NetworkMemory.key}=" +
          s"${rawOf(SluiceOptions.NetworkMemory)} to result partitions and input gates; they need at least 2: lower " +
          s"${SluiceOptions.ReadMemory.key} or raise ${SluiceOptions.NetworkMemory.key}")
      n.toInt
    }
  }

  /** The server's read segments when the network memory holds `total` segments. */
  private def readSegmentsOf(total: Long): Long = {
    val configured = get(SluiceOptions.ReadMemory)
    if (configured == 0) math.max(1L, total / 8) else configured / segmentSize
  }

  /** The segments of the executor's NetworkBufferPool: its network memory less the server's read buffers. */
  def numberOfPoolSegments: Int = numberOfSegments - numberOfReadSegments

  /**
   * The fewest segments the executor's NetworkBufferPool needs so that `taskSlots` tasks running at
   * once always make progress. Every task holds from its start its map output's sort-buffer minimum
   * (1) and, when it may read remote map outputs (`remoteReads`: not on a local master), its input
   * gate's floating-pool minimum (1); a gate's first read then takes, in one request, its scratch
   * segments (one to read spilled local data into, one more to decompress into when `compressed`)
   * and its first remote channel's exclusive buffers (buffersPerChannel, when credit-based and
   * within maxRequiredBuffersPerGate). With fewer, every task can hold its minimums while each
   * starting gate waits for what the others hold, until spark.sluice.network.bufferRequestTimeout.
   */
  def minPoolSegments(taskSlots: Int, compressed: Boolean, remoteReads: Boolean): Long =
    taskSlots * heldPerTask(remoteReads) + gateStartSegments(compressed, remoteReads)

  /** Segments every task holds from its start: its output's sort-buffer minimum, its gate's floating one. */
  private def heldPerTask(remoteReads: Boolean): Long = if (remoteReads) 2L else 1L

  /** Segments a starting gate's first request takes: its scratch and its first remote channel's exclusive buffers. */
  private def gateStartSegments(compressed: Boolean, remoteReads: Boolean): Long = {
    val buffersPerChannel = get(SluiceOptions.BuffersPerChannel)
    val exclusive =
      if (remoteReads && get(SluiceOptions.CreditBased) && buffersPerChannel <= get(SluiceOptions.MaxRequiredBuffersPerGate))
        buffersPerChannel
      else 0
    val scratch = if (compressed) 2 else 1
    scratch + exclusive
  }

  /**
   * Refuses network memory whose pool holds fewer than [[minPoolSegments]], naming the settings
   * involved and the least spark.sluice.network.memory that would do (the executor's start-up
   * check). `slots` says where `taskSlots` came from.
   */
  def checkTaskSlots(taskSlots: Int, slots: String, compressed: Boolean, remoteReads: Boolean): Unit = {
    val need = minPoolSegments(taskSlots, compressed, remoteReads)
    if (numberOfPoolSegments < need) {
      val least = Iterator.iterate(need)(_ + 1).find(n => n - readSegmentsOf(n) >= need).get * segmentSize
      val held = if (remoteReads) "its input gate's floating minimum and its map output's sort buffer"
      else "its map output's sort buffer"
      val start = gateStartSegments(compressed, remoteReads)
      throw new IllegalArgumentException(s"${SluiceOptions.NetworkMemory.key}=${rawOf(SluiceOptions.NetworkMemory)} " +
        s"gives this executor's $taskSlots task slots ($slots) $numberOfPoolSegments network buffers of $segmentSize " +
        s"bytes (${SluiceOptions.SegmentSize.key}=${rawOf(SluiceOptions.SegmentSize)}, less the server's read memory, " +
        s"${SluiceOptions.ReadMemory.key}), fewer than the $need they need to make progress: " +
        s"${heldPerTask(remoteReads)} per task from its start ($held) and $start for a starting input gate's " +
        s"scratch and exclusive buffers (${SluiceOptions.BuffersPerChannel.key}=${get(SluiceOptions.BuffersPerChannel)}). " +
        s"With fewer, tasks wait out ${SluiceOptions.RequestBufferTimeout.key} for buffers other waiting tasks hold. " +
        s"Set ${SluiceOptions.NetworkMemory.key} to at least ${ConfigType.BytesType.render(least)}, lower " +
        s"${SluiceOptions.BuffersPerChannel.key}, or run fewer tasks at once per executor")
    }
  }

  private def rawOf(o: ConfigOption[_]): String = raw.getOrElse(o.key, o.defaultString)

  override def toString: String =
    SluiceOptions.all.map(o => s"${o.key}=${raw.getOrElse(o.key, render(o))}").mkString("SluiceConf(", ", ", ")")

  private def render[T](o: ConfigOption[T]): String = o.tpe.render(get(o))
}

object SluiceConf {

  /**
   * Reads the `spark.sluice.*` entries of `settings`; other keys are ignored. A setting left at its
   * default that an [[AtLeast]] rule puts below its bound rises to the bound (a larger segment size
   * raises the frame length with it); one that was set is checked, and refused below it.
   */
  def apply(settings: Iterable[(String, String)]): SluiceConf = {
    val mine = settings.filter(_._1.startsWith(ConfigOption.Prefix)).toMap
    mine.foreach { case (key, value) =>
      if (!SluiceOptions.byKey.contains(key)) {
        throw new IllegalArgumentException(s"Unknown Sluice setting $key (set to '$value')" +
          suggestion(key).fold("")(s => s"; did you mean $s?"))
      }
    }
    val parsed = SluiceOptions.all.map { o =>
      o.key -> mine.get(o.key).map(v => o.parse(v): Any).getOrElse(o.default: Any)
    }.toMap
    val risen = AtLeast.all.filterNot(r => mine.contains(r.subject.key)).map { r =>
      val least = r.bound(parsed(r.reference.key).asInstanceOf[Long])
      r.subject.key -> (math.max(parsed(r.subject.key).asInstanceOf[Long], least): Any)
    }
    val conf = new SluiceConf(parsed ++ risen, mine)
    checkCombinations(conf)
    conf
  }

  val defaults: SluiceConf = apply(Nil)

  /**
   * The most bytes a frame carries beside one segment's payload: the frame header (9) and the
   * largest PackedBufferResponse header (32 fixed bytes, then 256 entries of 21 bytes and a 16-byte
   * IV each when Spark's I/O encryption is on). Every other message's header is smaller. The netty
   * package's tests check this against the messages' own lengths.
   */
  final val MaxFrameOverhead = 9 + 32 + 256 * (21 + 16)

  /**
   * The smallest spark.sluice.network.maxFrameLength accepted with `segmentSize`: the largest frame
   * a server builds (a full segment of payload under the largest header, [[MaxFrameOverhead]]),
   * the bound of the frame-length rule in [[AtLeast.all]].
   */
  def minMaxFrameLength(segmentSize: Long): Long = segmentSize + MaxFrameOverhead

  private def checkCombinations(conf: SluiceConf): Unit = {
    AtLeast.all.flatMap(_.violation(conf)).headOption.foreach(why => throw new IllegalArgumentException(why))
    conf.numberOfPoolSegments
  }

  private def suggestion(key: String): Option[String] = {
    val k = key.toLowerCase(Locale.ROOT)
    val scored = SluiceOptions.all.map(o => o.key -> distance(k, o.key.toLowerCase(Locale.ROOT)))
    scored.filter(_._2 <= 4).sortBy(_._2).headOption.map(_._1)
  }

  private def distance(a: String, b: String): Int = {
    val d = Array.tabulate(a.length + 1, b.length + 1)((i, j) => if (i == 0) j else if (j == 0) i else 0)
    for (i <- 1 to a.length; j <- 1 to b.length) {
      val cost = if (a(i - 1) == b(j - 1)) 0 else 1
      d(i)(j) = math.min(math.min(d(i - 1)(j) + 1, d(i)(j - 1) + 1), d(i - 1)(j - 1) + cost)
    }
    d(a.length)(b.length)
  }
}
