package io.sluice.metrics

import io.sluice.metrics.BatchDiagnosis._
import org.scalatest.funsuite.AnyFunSuite

class BatchDiagnosisSuite extends AnyFunSuite {

  private val MiB = 1L << 20

  /** A reduce task: 1000 ms of run time, 4 MiB and 1000 records read, no waits by default. */
  private def task(
      p: Int,
      exec: String = "1",
      run: Long = 1000,
      fetch: Long = 0,
      bytes: Long = 4 * MiB,
      records: Long = 1000,
      spill: Long = 0,
      bufferWait: Long = 0,
      waits: Map[String, Long] = Map.empty): Task =
    Task(p, exec, run, fetch, bytes, records, spill, bufferWait, waits)

  /** Eight balanced reduce tasks over executors 1 and 2. */
  private def balanced: Seq[Task] = (0 until 8).map(p => task(p, exec = (1 + p % 2).toString))

  private def healthy(r: Result): Boolean = r.cause.startsWith("No single cause: compute-bound")

  test("no tasks: says so") {
    assert(diagnose(Nil).cause == NoTasks)
  }

  test("a balanced stage is not blamed") {
    val r = diagnose(balanced)
    assert(healthy(r), r.cause)
    assert(r.slowExecutor.isEmpty && r.slowProducer.isEmpty)
    assert(r.tasks == 8 && r.runTimeMs == 8000 && r.maxPartitionBytes == 4 * MiB && r.medianPartitionBytes == 4 * MiB)
  }

  test("skew: a partition at 4x the median is named, just below it is not") {
    val at = balanced.updated(5, task(5, exec = "2", bytes = 16 * MiB, records = 4000, run = 4000))
    val r = diagnose(at)
    assert(r.cause.startsWith("Skew: reduce partition 5 read 16.0 MiB, 4.0× the median"), r.cause)
    assert(r.maxPartitionId == 5 && r.skewRatio == 4.0)
    val below = balanced.updated(5, task(5, exec = "2", bytes = 16 * MiB - 1, records = 4000, run = 4000))
    assert(healthy(diagnose(below)), diagnose(below).cause)
  }

  test("skew needs at least 1 MiB in the largest partition and three readers") {
    val small = balanced.map(_.copy(bytesRead = 1000)).updated(3, task(3, bytes = MiB - 1, records = 4000, run = 4000))
    assert(healthy(diagnose(small)), diagnose(small).cause)
    val big = balanced.map(_.copy(bytesRead = 1000)).updated(3, task(3, bytes = MiB, records = 4000, run = 4000))
    assert(diagnose(big).cause.startsWith("Skew: reduce partition 3"), diagnose(big).cause)
    val two = Seq(task(0, bytes = 100 * MiB), task(1, exec = "2", bytes = MiB))
    assert(!diagnose(two).cause.startsWith("Skew"), diagnose(two).cause)
  }

  test("waits for network buffers: named from 10 % of the run time and 200 ms") {
    val at = balanced.map(_.copy(bufferWaitMs = 100)) // 800 of 8000 ms
    val r = diagnose(at)
    assert(r.cause.startsWith("Waits for network buffers: tasks waited 800 ms (10 % of their run time)"), r.cause)
    assert(r.cause.contains("spark.sluice.network.memory"))
    assert(healthy(diagnose(balanced.map(_.copy(bufferWaitMs = 99)))))
    // Short stages: 10 % of 1 s is not worth a sentence.
    val short = Seq(task(0, run = 100, bufferWait = 50), task(1, exec = "2", run = 100, bufferWait = 50))
    assert(healthy(diagnose(short)), diagnose(short).cause)
  }

  test("a slow executor: 3x the others' time per record is named, below it is not") {
    val slow = balanced.map(t => if (t.executorId == "2") t.copy(runTimeMs = 3000) else t)
    val r = diagnose(slow)
    assert(r.slowExecutor == "2" && r.slowExecutorRatio == 3.0, r)
    assert(r.cause.startsWith("A slow executor: tasks on executor 2 were 3.0× slower"), r.cause)
    val notSlow = balanced.map(t => if (t.executorId == "2") t.copy(runTimeMs = 2999) else t)
    assert(healthy(diagnose(notSlow)), diagnose(notSlow).cause)
  }

  test("a skewed partition does not make its executor slow: time is per record read") {
    val skew = balanced.updated(1, task(1, exec = "2", bytes = 40 * MiB, records = 10000, run = 10000))
    val r = diagnose(skew)
    assert(r.slowExecutor.isEmpty && r.cause.startsWith("Skew: reduce partition 1"), r.cause)
  }

  test("a stage reading nothing compares time per task, and one executor alone is never slow") {
    val maps = (0 until 6).map(p =>
      task(p, exec = (1 + p % 2).toString, bytes = 0, records = 0,
        run = if (p % 2 == 1) 4000 else 1000))
    assert(diagnose(maps).slowExecutor == "2", diagnose(maps).cause)
    assert(diagnose(maps.map(_.copy(executorId = "1"))).slowExecutor.isEmpty)
  }

  test("a slow peer: most of a network-bound stage's input wait on one producer") {
    val waits = balanced.map(_.copy(runTimeMs = 2000, fetchWaitMs = 600,
        inputWaitByProducerMs = Map("1" -> 100L, "2" -> 500L)))
    val r = diagnose(waits) // fetch 4800 of 16000 ms: 30 %; executor 2 has 4000 of 4800 ms of waits
    assert(r.slowProducer == "2" && r.slowProducerWaitMs == 4000, r)
    assert(
      r.cause.startsWith("A slow or overloaded peer: reduce tasks waited 30 % of their run time for input, " +
        "4000 ms of it for executor 2's map outputs"), r.cause)
  }

  test("network-bound needs 30 % of the run time and 500 ms per task; a slow peer also well over its share") {
    def stage(run: Long, fetch: Long, one: Long, two: Long) =
      diagnose(balanced.map(_.copy(runTimeMs = run, fetchWaitMs = fetch, inputWaitByProducerMs = Map("1" -> one, "2" -> two))))
    val under = stage(2000, 599, 99, 500) // 29.95 %
    assert(under.slowProducer.isEmpty && healthy(under), under.cause)
    val short = stage(1000, 499, 99, 400) // 49.9 %, but under 500 ms per task: loopback's first-buffer latency
    assert(short.slowProducer.isEmpty && healthy(short), short.cause)
    val even = stage(2000, 600, 280, 320) // executor 2: 53 % of the waits, under 1.5 / 2
    assert(even.slowProducer.isEmpty && even.cause.startsWith("Network-bound: tasks waited 30 %"), even.cause)
  }

  test("spill: named from a quarter of the bytes read") {
    val at = balanced.map(_.copy(spillBytes = MiB)) // 8 MiB against 32 MiB
    assert(diagnose(at).cause.startsWith("Spill: tasks spilled 8.0 MiB"), diagnose(at).cause)
    assert(healthy(diagnose(balanced.map(_.copy(spillBytes = MiB - 1)))))
  }

  test("buffer waits come first, then a slow peer, then skew, then a slow executor") {
    val all = balanced.updated(5, task(5, exec = "2", bytes = 40 * MiB, records = 4000, run = 4000))
      .map(t => if (t.executorId == "2") t.copy(runTimeMs = t.runTimeMs * 5) else t)
    assert(diagnose(all).cause.startsWith("Skew"), diagnose(all).cause)
    assert(diagnose(all.map(_.copy(bufferWaitMs = 1000))).cause.startsWith("Waits for network buffers"))
  }
}
