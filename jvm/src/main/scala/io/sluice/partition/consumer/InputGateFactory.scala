package io.sluice.partition.consumer

import scala.collection.mutable

import io.sluice.buffer.BlockCodec
import io.sluice.config.{SluiceConf, SluiceOptions}
import io.sluice.memory.NetworkBufferPool
import io.sluice.netty.{MultiPartitionRequest, NettyConnectionManager, PartitionRequestClient}
import io.sluice.partition.{FallbackStorage, PartitionedFileCipher, ResultPartitionID, ResultPartitionManager}

/** One input of a gate: subpartitions [start, end) of a producer's partition, and where it runs. */
final case class GateInput(partitionId: ResultPartitionID, subpartitionStart: Int, subpartitionEnd: Int,
    producer: ProducerLocation)

/**
 * Builds the input gates of one executor (Flink's SingleInputGateFactory): the entry point the
 * Spark layer's reader calls. A regular (blocking) gate reads with one channel per producing
 * executor: one [[LocalInputChannel]] over every input produced in this executor, one packed
 * [[RemoteInputChannel]] over every input of each other executor (one request, one credit stream,
 * many map outputs per frame; more when one request would exceed spark.sluice.network.maxFrameLength),
 * so its channels and requests grow with the executors it reads from, not with the map outputs; the
 * inputs a decommissioned executor left in Spark's fallback storage are read by one
 * [[FallbackInputChannel]], and the finished inputs of another executor on this host whose files
 * `hostLocal` can read by one [[LocalInputChannel]] over them (Spark's
 * spark.shuffle.readHostLocalDisk), with no request, credit or connection. A pipelined gate has
 * one channel per input. Each gate has a floating
 * buffer pool:
 *  - credit-based: at least 1 and at most max(floatingBuffersPerGate, maxCreditWindow -
 *    buffersPerChannel) buffers, on top of the buffersPerChannel exclusive ones of each remote
 *    channel in flight; each channel's [[CreditWindow]] starts at buffersPerChannel +
 *    floatingBuffersPerGate and grows into the rest while the channel runs dry with data at its sender;
 *  - credit-based, for a regular gate whose remote channels in flight would need more exclusive
 *    buffers than maxRequiredBuffersPerGate: none at all (Flink past FLINK-30473's threshold), the
 *    pool up to max(floatingBuffersPerGate, maxCreditWindow), every channel's credit floating, so
 *    the gate's memory does not grow with the executors it reads;
 *  - credit-less: no exclusive buffers, so the pool may grow to floatingBuffersPerGate +
 *    buffersPerChannel x remote channels in flight (the same total as with credit, and as bounded),
 *    shared by every channel.
 * A regular gate has at most maxChannelsInFlightPerGate channels in flight; a pipelined one has
 * every channel in flight (see [[SingleInputGate]]). Creating a gate takes only its floating
 * pool's minimum: channels and their exclusive buffers come with its first read.
 * Thread-safe (gates are created by task threads).
 *
 * @param fileCipher decrypts spilled buffers of encrypted partition files (Spark's I/O encryption), or None
 * @param fallbackStorage Spark's decommissioning fallback storage, when it is configured
 * @param hostLocal the map outputs of other executors on this host read from their files, or None
 *                  (read from their servers)
 */
final class InputGateFactory(
    conf: SluiceConf,
    networkBufferPool: NetworkBufferPool,
    partitionManager: ResultPartitionManager,
    connectionManager: NettyConnectionManager,
    localExecutorId: String,
    fileCipher: Option[PartitionedFileCipher] = None,
    fallbackStorage: Option[FallbackStorage] = None,
    hostLocal: Option[HostLocalPartitions] = None) {

  private val creditBased = conf.get(SluiceOptions.CreditBased)
  private val buffersPerChannel = conf.get(SluiceOptions.BuffersPerChannel)
  private val floatingPerGate = conf.get(SluiceOptions.FloatingBuffersPerGate)
  private val requestTimeoutMs = conf.get(SluiceOptions.RequestTimeout)
  private val bufferRequestTimeoutMs = conf.get(SluiceOptions.RequestBufferTimeout)
  private val maxChannelsInFlight = conf.get(SluiceOptions.MaxChannelsInFlightPerGate)
  private val maxInputsPerRequest = MultiPartitionRequest.maxInputs(conf.get(SluiceOptions.MaxFrameLength))
  private val maxRequiredPerGate = conf.get(SluiceOptions.MaxRequiredBuffersPerGate)
  private val maxCreditWindow = conf.get(SluiceOptions.MaxCreditWindow)

  /**
   * A gate with a LocalInputChannel for inputs whose producer.executorId == localExecutorId and a
   * RemoteInputChannel for the rest (one channel per producing executor unless `pipelined`: then
   * one per input, as a pipelined subpartition is read on its own); `waitForProducers` lets requests wait for
   * producers that have not registered yet, and requests every channel at once. Nothing is
   * requested before the gate's first getNext. A producer that cannot be reached or a missing
   * partition fails its channel (reported by the gate's getNext, naming the channel). Waits (up
   * to spark.sluice.network.bufferRequestTimeout) while the executor's network memory cannot give
   * the floating pool its minimum.
   */
  def create(owner: String, inputs: IndexedSeq[GateInput], codec: Option[BlockCodec], waitForProducers: Boolean,
      pipelined: Boolean): SingleInputGate = {
    val window = if (waitForProducers) SingleInputGate.AllAtOnce else maxChannelsInFlight
    val groups = channelGroups(inputs, pipelined)
    val numRemote = groups.count(g => isRemote(g._1))
    val exclusive = math.min(buffersPerChannel.toLong * math.min(numRemote, window), Int.MaxValue.toLong).toInt
    // Flink's threshold (FLINK-30473): past it, a regular gate's channels take no exclusive buffer.
    val exclusivePerChannel = if (!pipelined && exclusive > maxRequiredPerGate) 0 else buffersPerChannel
    val (required, max) =
      if (numRemote == 0) (0, 1)
      else if (!creditBased) (1, math.max(1, floatingPerGate + math.min(exclusive, maxRequiredPerGate)))
      else if (exclusivePerChannel == 0) (1, math.max(1, math.max(floatingPerGate, maxCreditWindow)))
      else (1, math.max(1, math.max(floatingPerGate, maxCreditWindow - buffersPerChannel)))
    // A regular gate's remote channel carries everything one executor wrote for the task: its credit
    // window starts at, and never shrinks below, its share of the gate's floating pool (at least Flink's
    // floatingBuffersPerGate), so a gate reading from few executors keeps their senders busy through
    // the task's pauses (reading local data, a sender's threads descheduled on a busy host).
    val initialFloating =
      if (pipelined || !creditBased || numRemote == 0) floatingPerGate
      else math.max(floatingPerGate, max / math.max(1, math.min(numRemote, window)))
    val pool = networkBufferPool.createBufferPool(required, max, s"input gate of $owner", bufferRequestTimeoutMs)
    val gate =
      try new SingleInputGate(owner, networkBufferPool, pool, codec, requestTimeoutMs, bufferRequestTimeoutMs, window,
          fileCipher, initialFloatingCredit = initialFloating)
      catch {
        case e: Throwable => pool.lazyDestroy(); throw e
      }
    try {
      // One connection attempt per remote server for the whole gate: a dead server fails its
      // channels once, not once per channel.
      val clients = mutable.HashMap.empty[(String, Int), Either[Throwable, PartitionRequestClient]]
      val connect: ProducerLocation => PartitionRequestClient = p =>
        clients.synchronized {
          clients.getOrElseUpdate((p.host, p.port),
            try Right(connectionManager.createPartitionRequestClient(p.host, p.port, p.node))
            catch { case e: Throwable => Left(e) })
        } match {
          case Right(c) => c
          case Left(e) => throw e
        }
      val channels: Array[InputChannel] = groups.zipWithIndex.map { case ((producer, group), i) =>
        if (producer.fallback) {
          new FallbackInputChannel(gate, i, group, producer, fallbackStorage)
        } else if (producer.hostLocal) {
          new LocalInputChannel(gate, i, group, producer, hostLocal.get.partitionManager, waitForProducer = false)
        } else if (producer.executorId == localExecutorId) {
          new LocalInputChannel(gate, i, group, producer, partitionManager, waitForProducers)
        } else {
          new RemoteInputChannel(gate, i, group, producer, connect, creditBased, exclusivePerChannel, waitForProducers,
            bufferRequestTimeoutMs, packed = !pipelined)
        }
      }.toArray
      val readsSpilledLocally = groups.exists(_._1.hostLocal) || inputs.exists(in =>
        in.producer.fallback || (in.producer.executorId == localExecutorId &&
          partitionManager.isBlocking(in.partitionId)))
      gate.setChannels(channels, readsSpilledLocally)
      // Every executor the gate reads from gets its connection opened now, on the connector threads,
      // so a channel whose turn in the window comes later finds it open.
      groups.foreach { case (p, _) =>
        if (isRemote(p)) connectionManager.connectAhead(p.host, p.port, p.node)
      }
      gate
    } catch {
      case e: Throwable =>
        try gate.close()
        catch { case c: Throwable => e.addSuppressed(c) }
        throw e
    }
  }

  /**
   * The gate's channels, each a producer and the inputs it reads (with their indexes in `inputs`):
   * for a regular gate one per producing executor (and one for the fallback storage), remote ones
   * first (their requests go out while local data is read), a remote executor's inputs split over as many channels as the frame limit
   * requires (each channel's request must fit one frame, [[MultiPartitionRequest.maxInputs]]), those
   * of another executor on this host whose files `hostLocal` reads in one channel of their own
   * (its other inputs, say moved to it from elsewhere, from its server); for a pipelined gate one
   * per input, in order.
   */
  private def channelGroups(
      inputs: IndexedSeq[GateInput], pipelined: Boolean): IndexedSeq[(ProducerLocation, IndexedSeq[ChannelInput])] = {
    if (pipelined) {
      inputs.indices.map { i =>
        val in = inputs(i)
        (in.producer, IndexedSeq(ChannelInput(i, in.partitionId, in.subpartitionStart, in.subpartitionEnd)))
      }
    } else {
      // One pass, in the order the executors first appear: remote ones first, the local one last.
      val byExecutor = new java.util.LinkedHashMap[String, (ProducerLocation, mutable.ArrayBuffer[ChannelInput])]()
      var i = 0
      while (i < inputs.size) {
        val in = inputs(i)
        var group = byExecutor.get(in.producer.executorId)
        if (group == null) {
          group = (in.producer, mutable.ArrayBuffer.empty[ChannelInput])
          byExecutor.put(in.producer.executorId, group)
        }
        group._2 += ChannelInput(i, in.partitionId, in.subpartitionStart, in.subpartitionEnd)
        i += 1
      }
      val out = new mutable.ArrayBuffer[(ProducerLocation, IndexedSeq[ChannelInput])](byExecutor.size)
      val notRemote = new mutable.ArrayBuffer[(ProducerLocation, IndexedSeq[ChannelInput])](2)
      val groups = byExecutor.values().iterator()
      while (groups.hasNext) {
        val (p, all) = groups.next()
        val group = if (isRemote(p)) readHostLocal(p, all, notRemote) else all
        if (!isRemote(p)) notRemote += ((p, group.toIndexedSeq))
        else if (group.nonEmpty) group.grouped(maxInputsPerRequest).foreach(part => out += ((p, part.toIndexedSeq)))
      }
      (out ++= notRemote).toIndexedSeq
    }
  }

  /**
   * The inputs of remote producer `p` left to read from its server: when `hostLocal` knows `p`'s
   * executor, those whose files it can read go to `notRemote` as one host-local group.
   */
  private def readHostLocal(p: ProducerLocation, inputs: mutable.ArrayBuffer[ChannelInput],
      notRemote: mutable.ArrayBuffer[(ProducerLocation, IndexedSeq[ChannelInput])]): mutable.ArrayBuffer[ChannelInput] =
    hostLocal match {
      case Some(h) if h.knowsOrLearns(p) =>
        val (fromDisk, fromServer) = inputs.partition(in => h.register(in.partitionId, p.executorId))
        if (fromDisk.nonEmpty) notRemote += ((p.copy(hostLocal = true), fromDisk.toIndexedSeq))
        fromServer
      case _ => inputs
    }

  /** Whether `p`'s outputs are read over the network from a Sluice server (not this executor's, not fallback storage). */
  private def isRemote(p: ProducerLocation): Boolean = !p.fallback && !p.hostLocal && p.executorId != localExecutorId
}
