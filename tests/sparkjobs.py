"""Small Spark jobs the Sluice tests run, and how to find their stages."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional

from pyspark import InheritableThread
from pyspark.sql import SparkSession


def stages_of_group(spark: SparkSession, group: str) -> List[int]:
    """The ids of every stage of every job of ``group`` (skipped ones included)."""
    tracker = spark.sparkContext.statusTracker()
    stages = set()
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        if info is not None:
            stages.update(info.stageIds)
    return sorted(stages)


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


def slow_consumer_job(
    spark: SparkSession, tasks: int = 2, records: int = 3000, pause_ms: int = 2
) -> Background:
    """Starts SlowConsumerJob (the test jar): each task's producer writes into a Sluice pipelined
    partition that a slow consumer thread of the same task reads, so the task thread really
    blocks on buffer requests. Returns the running job; ``join()`` gives the records read."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    job = jvm.org.apache.spark.shuffle.sluice.SlowConsumerJob
    jsc = spark.sparkContext._jsc
    assert jsc is not None
    return Background(
        spark, "sluice-slow-consumer", lambda: job.run(jsc.sc(), tasks, records, 1000, pause_ms)
    )


def sample_until_all_tasks_seen(
    spark: SparkSession, stage: int, tasks: int, timeout: float = 60.0
) -> Dict[str, Any]:
    """Asks the backpressure monitor about ``stage`` until one sample covered ``tasks`` running
    tasks (right after a stage starts, its tasks may not run yet); returns that row."""
    import sluice

    deadline = time.monotonic() + timeout
    row: Dict[str, Any] = {}
    while time.monotonic() < deadline:
        [row] = sluice.backpressure(spark, stage).to_pylist()
        if row["sampled_tasks"] >= tasks:
            return row
        time.sleep(0.2)
    raise AssertionError(f"no sample of stage {stage} saw {tasks} running tasks within {timeout}s: {row}")
