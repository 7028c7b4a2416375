package org.apache.spark.shuffle.sluice

import java.io.{EOFException, FileInputStream, IOException}
import java.nio.ByteBuffer

import scala.util.control.NonFatal

import io.sluice.PartitionExport
import io.sluice.partition.{FallbackStorage, ResultPartitionID, StoredFile}
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FSDataInputStream, FileSystem, Path, StreamCapabilities}
import org.apache.spark.SparkConf
import org.apache.spark.internal.Logging
import org.apache.spark.shuffle.sluice.internal.SparkInternals
import org.apache.spark.shuffle.sluice.rpc.ShuffleMigration

/**
 * Sluice's map outputs in Spark's decommissioning fallback storage
 * (`spark.storage.decommission.fallbackStorage.path`, any Hadoop file system): the Hadoop side of
 * the engine's [[FallbackStorage]]. A decommissioning executor copies a finished map output there
 * when Spark's decommissioner hands it to the fallback storage ([[SluiceShuffleBlockResolver]]), as
 * `<path>/<application id>/<shuffle id>/sluice-<map id>.data` and `.index` (the index behind the
 * envelope naming the partition, as decommissioning sends it to a peer); readers open both with
 * positioned reads; the driver deletes a shuffle's directory when Spark drops the shuffle and the
 * application's directory when the application ends ([[SluiceShuffleDriverComponents]]). The file
 * system is the one Spark's own clients get (spark.hadoop.*, Hadoop's configuration files), opened
 * on first use. Thread-safe.
 */
private[sluice] final class SluiceFallbackStorage(val root: Path, appId: String, hadoopConf: Configuration)
  extends FallbackStorage with Logging {

  private lazy val fs: FileSystem = root.getFileSystem(hadoopConf)

  /** The application's directory: every file Sluice puts in the fallback storage for it lies below. */
  def applicationDir: Path = new Path(root, appId)

  def shuffleDir(shuffleId: Int): Path = new Path(applicationDir, shuffleId.toString)

  def dataPath(id: ResultPartitionID): Path = new Path(shuffleDir(id.shuffleId), s"sluice-${id.producerId}.data")

  def indexPath(id: ResultPartitionID): Path = new Path(shuffleDir(id.shuffleId), s"sluice-${id.producerId}.index")

  /**
   * Copies finished partition `id` (its executor's [[io.sluice.PartitionExport]]) into the fallback storage,
   * replacing an earlier copy: the data file, then its index. What was written is deleted when the
   * copy fails, and an IOException names the path.
   */
  def copy(id: ResultPartitionID, exported: PartitionExport): Unit = {
    val data = dataPath(id)
    try {
      val out = fs.create(data, true)
      try {
        val in = new FileInputStream(exported.file)
        try {
          val chunk = new Array[Byte](SluiceFallbackStorage.CopyChunk)
          var left = exported.length
          while (left > 0) {
            val n = in.read(chunk, 0, math.min(left, chunk.length.toLong).toInt)
            if (n < 0) throw new EOFException(s"${exported.file} ends ${left} bytes before its ${exported.length}")
            out.write(chunk, 0, n)
            left -= n
          }
        } finally in.close()
      } finally out.close()
      val index = fs.create(indexPath(id), true)
      try index.write(exported.index)
      finally index.close()
    } catch {
      case NonFatal(e) =>
        delete(id)
        throw new IOException(s"Could not copy map output ($id) to the fallback storage at $data: $e", e)
    }
  }

  /** Deletes the copy of `id`, if any (best effort: a failure is logged). */
  def delete(id: ResultPartitionID): Unit = Seq(dataPath(id), indexPath(id)).foreach(deleteQuietly(_, recursive = false))

  /** Deletes every copy of shuffle `shuffleId` (the driver, when Spark drops the shuffle). */
  def deleteShuffle(shuffleId: Int): Unit = deleteQuietly(shuffleDir(shuffleId), recursive = true)

  /** Deletes everything Sluice put in the fallback storage for the application (the driver, when it ends). */
  def deleteApplication(): Unit = deleteQuietly(applicationDir, recursive = true)

  private def deleteQuietly(path: Path, recursive: Boolean): Unit =
    try if (fs.delete(path, recursive)) logDebug(s"Deleted $path from the fallback storage")
    catch { case NonFatal(e) => logWarning(s"Could not delete $path from the fallback storage: $e") }

  override def openData(id: ResultPartitionID): StoredFile = open(dataPath(id))

  override def openIndex(id: ResultPartitionID): StoredFile = open(indexPath(id))

  private def open(path: Path): StoredFile = {
    val length =
      try fs.getFileStatus(path).getLen
      catch { case e: IOException => throw new IOException(s"Cannot open $path in the fallback storage: $e", e) }
    new SluiceFallbackStorage.HadoopFile(path, fs.open(path), length)
  }

  override def toString: String = s"SluiceFallbackStorage($applicationDir)"
}

private[sluice] object SluiceFallbackStorage {

  /** Spark's settings of its fallback storage. */
  val PathKey = "spark.storage.decommission.fallbackStorage.path"
  val CleanUpKey = "spark.storage.decommission.fallbackStorage.cleanUp"

  private val CopyChunk = 64 * 1024

  /**
   * Whether decommissioning executors may put their map outputs into the fallback storage: its
   * path is set and shuffle blocks move at all ([[ShuffleMigration.enabled]]).
   */
  def configured(conf: SparkConf): Boolean =
    ShuffleMigration.enabled(conf) && conf.getOption(PathKey).exists(_.trim.nonEmpty)

  /** The application's fallback storage, when [[configured]]. */
  def apply(conf: SparkConf): Option[SluiceFallbackStorage] =
    if (!configured(conf)) None
    else Some(new SluiceFallbackStorage(new Path(conf.get(PathKey).trim), conf.getAppId,
        SparkInternals.hadoopConfiguration(conf)))

  /**
   * A file of the fallback storage open for positioned reads: straight into the target buffer when
   * the stream can (Hadoop's ByteBufferPositionedReadable, e.g. HDFS), else through a small heap
   * chunk (the local file system's checksummed stream). One reader's; one thread at a time.
   */
  private final class HadoopFile(path: Path, in: FSDataInputStream, override val length: Long) extends StoredFile {
    private val intoBuffers = in.hasCapability(StreamCapabilities.PREADBYTEBUFFER)
    private var chunk: Array[Byte] = _

    override def readFully(position: Long, target: ByteBuffer): Unit = {
      val n = target.remaining()
      if (position < 0 || position + n > length) {
        throw new EOFException(s"$path has $length bytes: cannot read $n at $position")
      }
      if (target.hasArray) {
        in.readFully(position, target.array(), target.arrayOffset() + target.position(), n)
        target.position(target.limit())
      } else if (intoBuffers) in.readFully(position, target)
      else {
        if (chunk == null) chunk = new Array[Byte](math.min(CopyChunk, math.max(n, 4096)))
        var done = 0
        while (done < n) {
          val m = math.min(chunk.length, n - done)
          in.readFully(position + done, chunk, 0, m)
          target.put(chunk, 0, m)
          done += m
        }
      }
    }

    override def close(): Unit = in.close()

    override def toString: String = path.toString
  }
}
