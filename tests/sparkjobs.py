"""Small Spark jobs the Sluice tests run, and how to find their stages."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from pyspark import InheritableThread
from pyspark.sql import SparkSession
from sessions import stages_of_group


def run_in_group(spark: SparkSession, group: str, job: Callable[[], Any]) -> List[int]:
    """Runs ``job`` in job group ``group`` on this thread; returns the group's stage ids."""
    spark.sparkContext.setJobGroup(group, group)
    job()
    return stages_of_group(spark, group)


def shuffle_rows(spark: SparkSession, rows: int, partitions_in: int = 4, partitions_out: int = 3) -> None:
    """``rows`` rows (one record each) through one Sluice shuffle, fully consumed."""
    df = spark.range(0, rows, 1, partitions_in).repartition(partitions_out)
    df.write.format("noop").mode("overwrite").save()


class Background:
    """Runs ``job`` in its own job group on a thread that inherits the caller's local properties."""

    def __init__(self, spark: SparkSession, group: str, job: Callable[[], Any]) -> None:
        self.spark = spark
        self.group = group
        self.result: Any = None
        self.error: Optional[BaseException] = None

        def body() -> None:
            spark.sparkContext.setJobGroup(group, group)
            try:
                self.result = job()
            except BaseException as e:  # reported by join()
                self.error = e

        self.thread = InheritableThread(target=body, daemon=True)
        self.thread.start()

    def running_stage(self, timeout: float = 60.0) -> int:
        """The group's last stage (its result stage), once Spark runs it."""
        tracker = self.spark.sparkContext.statusTracker()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.error is not None:
                raise AssertionError(f"the background job failed: {self.error}")
            ours = stages_of_group(self.spark, self.group)
            if ours and max(ours) in tracker.getActiveStageIds():
                return max(ours)
            time.sleep(0.05)
        raise AssertionError(f"the last stage of {self.group} did not start within {timeout}s")

    def join(self, timeout: float = 120.0) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.group} did not finish within {timeout}s"
        if self.error is not None:
            raise self.error
        return self.result


def active_stages(spark: SparkSession) -> List[int]:
    """Stages with running tasks, oldest first."""
    tracker = spark.sparkContext.statusTracker()
    running = []
    for stage in tracker.getActiveStageIds():
        info = tracker.getStageInfo(stage)
        if info is not None and info.numActiveTasks > 0:
            running.append(stage)
    return sorted(running)


class SlowConsumerQuery:
    """A Real-Time Mode query whose consumer pauses 20 ms on every record while its producers
    shuffle 2 KB records through Sluice's pipelined shuffle: the producers fill their buffers and
    then block on buffer requests (credit-based backpressure reaching the producer). The pause
    keeps each consumer below 50 records a second, far below what a producer makes even on a
    loaded machine (one CI run saw starved producers make 180 a second, under a 2 ms pause's 500).
    Needs 4 free task slots (2 producers, 2 consumers)."""

    def __init__(self, spark: SparkSession, name: str = "slow_consumer") -> None:
        from pyspark.sql import DataFrame
        from pyspark.sql import functions as F
        from streaming import StreamingRun

        spark.conf.set("spark.sql.shuffle.partitions", "2")
        # The argument depends on the row, so the optimizer cannot fold the call into one sleep.
        pause = F.expr("reflect('java.lang.Thread', 'sleep', cast(value * 0 + 20 as bigint))")

        def query(df: DataFrame) -> DataFrame:
            padded = df.withColumn("pad", F.expr("repeat('x', 2000)"))
            aggregated = padded.groupBy("value").agg(F.max("pad").alias("pad"))
            return aggregated.select(
                (F.col("value") + F.coalesce(F.length(pause), F.lit(0)) * 0).alias("v"), F.length("pad").alias("n")
            )

        self.spark = spark
        self.run = StreamingRun(spark, query, name, real_time=True)
        for start in range(0, 200_000, 50_000):
            self.run.add(range(start, start + 50_000))

    def backpressured_stages(self, timeout: float = 90.0) -> Tuple[int, int, Dict[str, Any], List[Dict[str, Any]]]:
        """Watches the query's 5 s batches (each a producer and a consumer stage) until a sample
        of a producer stage is HIGH while its tasks' outPoolUsage is near 1.0 and both report
        time blocked on buffers (a task's first metrics report may come before it blocks).
        Returns (producer stage, consumer stage, its backpressure row, its tasks' metric rows)."""
        import sluice

        deadline = time.monotonic() + timeout
        row: Dict[str, Any] = {}
        tasks: List[Dict[str, Any]] = []
        while time.monotonic() < deadline:
            stages = active_stages(self.spark)
            if len(stages) >= 2:
                producer, consumer = stages[:2]
                time.sleep(0.5)  # the consumer falls behind; the producers fill their buffers
                tasks = [r for r in sluice.metrics(self.spark, wait=False).to_pylist() if r["stage_id"] == producer]
                # A batch lasts 5 s: the stage may end while we sample it; then watch the next batch.
                sampled = sample_while_running(self.spark, producer, tasks=2)
                if sampled is None:
                    continue
                row = sampled
                if (
                    row["backpressure_level"] == "HIGH"
                    and len(tasks) == 2
                    and max(r["outPoolUsage"] for r in tasks) >= 0.9
                    and all(r["backPressuredTimeMsPerSecond"] > 0 for r in tasks)
                ):
                    return producer, consumer, row, tasks
            time.sleep(0.2)
        raise AssertionError(f"no producer stage of the slow-consumer query was HIGH within {timeout}s: {row} {tasks}")

    def stop(self) -> None:
        self.run.stop()


def sample_while_running(spark: SparkSession, stage: int, tasks: int) -> Optional[Dict[str, Any]]:
    """One backpressure row of ``stage`` whose sample covered ``tasks`` running tasks, or None once
    the stage is no longer active (a streaming batch ended while it was sampled)."""
    import sluice

    tracker = spark.sparkContext.statusTracker()
    while stage in tracker.getActiveStageIds():
        [row] = sluice.backpressure(spark, stage_id=stage).to_pylist()
        if row["sampled_tasks"] >= tasks:
            return row
        time.sleep(0.2)
    return None


def sample_until_all_tasks_seen(spark: SparkSession, stage: int, tasks: int, timeout: float = 60.0) -> Dict[str, Any]:
    """Asks the backpressure monitor about ``stage`` until one sample covered ``tasks`` running
    tasks (right after a stage starts, its tasks may not run yet); returns that row."""
    import sluice

    deadline = time.monotonic() + timeout
    row: Dict[str, Any] = {}
    while time.monotonic() < deadline:
        [row] = sluice.backpressure(spark, stage_id=stage).to_pylist()
        if row["sampled_tasks"] >= tasks:
            return row
        time.sleep(0.2)
    raise AssertionError(f"no sample of stage {stage} saw {tasks} running tasks within {timeout}s: {row}")
