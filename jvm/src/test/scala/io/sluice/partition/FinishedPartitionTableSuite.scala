package io.sluice.partition

import java.io.File

import scala.collection.mutable
import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

class FinishedPartitionTableSuite extends AnyFunSuite {

  private val layout = new PartitionedFileLayout(IndexedSeq(new File("/tmp/a"), new File("/tmp/b"), new File("/tmp/c")))

  private def fileOf(shuffleId: Int, producerId: Long, path: Option[File] = None): PartitionedFile = {
    val id = ResultPartitionID(shuffleId, producerId)
    val iv = if (producerId % 3 == 0) Some(BufferIv(producerId, ~producerId)) else None
    PartitionedFile.restore(path.getOrElse(layout.writtenFile(id)), (producerId % 7).toInt + 1, iv,
      (producerId % 11).toInt, producerId * 10 + 1, null)
  }

  test("entries added and removed in any order are found with their totals, as a map of them would") {
    val random = new Random(42)
    val t = new FinishedPartitionTable(5)
    val model = mutable.Map.empty[Long, Int] // producer id -> layout code
    for (step <- 0 until 20000) {
      val producerId = random.nextInt(3000).toLong * 1000003L - 7L // negative, colliding and far-apart ids
      if (model.contains(producerId) && random.nextInt(3) > 0) {
        assert(t.remove(producerId), s"step $step")
        model.remove(producerId)
      } else if (!model.contains(producerId)) {
        val migrated = random.nextBoolean()
        val id = ResultPartitionID(5, producerId)
        val path = if (migrated) layout.migratedFile(id, step) else layout.writtenFile(id)
        t.add(producerId, fileOf(5, producerId, Some(path)), layout.code(id, path))
        model(producerId) = layout.code(id, path)
      }
      assert(t.size == model.size)
    }
    assert(!t.remove(Long.MinValue) && t.entryOf(Long.MinValue) == -1)
    for ((producerId, code) <- model) {
      val e = t.entryOf(producerId)
      assert(e >= 0 && t.producerId(e) == producerId)
      val f = fileOf(5, producerId)
      assert(t.fileLength(e) == f.size && t.numBuffers(e) == f.numBuffersTotal && t.numSubpartitions(e) == f.numSubpartitions)
      assert(t.iv(e) == f.iv)
      assert(t.path(e, Some(layout)) == layout.file(ResultPartitionID(5, producerId), code))
    }
    assert(t.totalBytes == model.keys.map(_ * 10 + 1).sum)
  }

  test("a file's first rebuild alone may load its index, whatever moves in the table; the IV stays its own") {
    val t = new FinishedPartitionTable(2)
    (1L to 4L).foreach(p => t.add(p, fileOf(2, p), 0))
    assert(t.grantIndexLoad(t.entryOf(4)) && !t.grantIndexLoad(t.entryOf(4)), "once")
    assert(t.remove(2)) // the last entry (producer 4) moves into the hole
    assert(!t.grantIndexLoad(t.entryOf(4)), "the grant moved with its entry")
    assert(t.grantIndexLoad(t.entryOf(3)) && t.iv(t.entryOf(3)) == Some(BufferIv(3, ~3L)), "and the IV did not change")
    t.add(2, fileOf(2, 2), 0)
    assert(t.grantIndexLoad(t.entryOf(2)), "a file registered again is a new file")
  }

  test("a file the layout cannot name keeps its path") {
    val t = new FinishedPartitionTable(1)
    val odd = new File("/elsewhere/shuffle-1-4.data")
    assert(layout.code(ResultPartitionID(1, 4), odd) == -1)
    assert(layout.code(ResultPartitionID(1, 4), new File("/tmp/x", layout.writtenFile(ResultPartitionID(1, 4)).getName)) == -1,
      "the right name in a directory the partition does not hash to")
    t.add(4, fileOf(1, 4, Some(odd)), -1)
    t.add(5, fileOf(1, 5), 0)
    assert(t.path(t.entryOf(4), Some(layout)) == odd && t.path(t.entryOf(4), None) == odd)
    assert(t.path(t.entryOf(5), Some(layout)) == layout.writtenFile(ResultPartitionID(1, 5)))
    assert(t.remove(4) && t.entryOf(4) == -1 && t.entryOf(5) == 0)
  }

  test("the layout names each file of a partition by a code it finds again") {
    val id = ResultPartitionID(3, 123456789012L)
    assert(layout.code(id, layout.writtenFile(id)) == 0)
    assert(layout.writtenFile(id).getName == "sluice-shuffle-3-123456789012.part")
    for (n <- Seq(0, 1, 17, PartitionedFileLayout.MaxMigrated)) {
      val f = layout.migratedFile(id, n)
      assert(f.getName == s"sluice-shuffle-3-123456789012.migrated-$n.part")
      assert(layout.file(id, layout.code(id, f)) == f)
    }
    assert(layout.code(ResultPartitionID(3, 1), layout.writtenFile(id)) == -1, "another partition's file")
    val dirs = (0 until 300).map(p => layout.writtenFile(ResultPartitionID(3, p)).getParentFile).toSet
    assert(dirs.size == 3, "written files spread over every local dir")
  }
}
