"""Batch stages with a known cause, as the batch diagnosis should name them: run in a process of
its own (a Python process starts one driver JVM) by test_batch_diagnosis.py, with an event log so
that the History Server can replay it. Writes what the live tab, its JSON and Python's tables show
to ``--out`` and stops the application (its log then has the application's end).

``--mode jobs`` (``local-cluster[2,1,1024]``, AQE off, 8 shuffle partitions, uncompressed), one
job group each:

* ``skew``: half of the rows under one key, repartitioned by key (no map-side combine);
* ``balanced``: the same rows spread over 1000 keys;
* ``slow``: an RDD shuffle whose reduce tasks sleep on executor 1 only (a saturated executor).

``--mode starved`` (``local-cluster[2,2,1024]``: two reduce tasks per executor): 64 KiB of network
memory for the tasks in 4 KiB segments (beside 8 KiB of the server's read memory), 11 exclusive
buffers per remote channel, so that one reduce task of an executor waits for the other's buffers.

``python tests/run_batch_diagnosis.py --mode jobs --event-log DIR --out result.json [--screenshot PNG]``
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import sluice
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from sessions import build_session, http_get, http_json, stages_of_group, ui_url, write_json

ROWS = 1_000_000
SLEEP_S = 3.0  # per reduce task on the slow executor


def noop(df: Any) -> None:
    df.write.format("noop").mode("overwrite").save()


def sleep_on_executor_1(rows: Iterator[Tuple[int, int]]) -> Iterator[int]:
    """Counts the rows; sleeps first when on executor 1. A standalone worker starts each executor
    in a directory named by its id, which Python workers inherit."""
    if os.path.basename(os.getcwd()) == "1":
        time.sleep(SLEEP_S)
    yield sum(1 for _ in rows)


def in_group(spark: SparkSession, group: str, job: Any) -> Dict[str, Any]:
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    job()
    jobs = sorted(sc.statusTracker().getJobIdsForGroup(group))
    sc.setJobGroup("", "")
    return {"stages": stages_of_group(spark, group), "jobs": jobs}


def run_jobs(spark: SparkSession) -> Dict[str, Any]:
    rows = spark.range(0, ROWS, 1, 4)
    skewed = rows.select(F.when(F.col("id") % 2 == 0, F.lit(0)).otherwise(F.col("id")).alias("k"), "id")
    groups = {"skew": in_group(spark, "skew", lambda: noop(skewed.repartition(8, "k")))}
    hot = skewed.repartition(8, "k").where("k = 0").select(F.spark_partition_id().alias("p")).distinct().collect()
    balanced = rows.select((F.col("id") % 1000).alias("k"), "id")
    groups["balanced"] = in_group(spark, "balanced", lambda: noop(balanced.repartition(8, "k")))
    sc = spark.sparkContext

    def slow_job() -> None:
        pairs = sc.parallelize(range(80_000), 4).map(lambda x: (x % 997, x))
        assert pairs.partitionBy(8).mapPartitions(sleep_on_executor_1).sum() == 80_000

    groups["slow"] = in_group(spark, "slow", slow_job)
    return {"groups": groups, "hot_partition": [r["p"] for r in hot]}


def run_starved(spark: SparkSession) -> Dict[str, Any]:
    rows = spark.range(0, 2 * ROWS, 1, 4).select((F.col("id") % 1000).alias("k"), "id", F.lit("x" * 40).alias("pad"))
    return {"groups": {"starved": in_group(spark, "starved", lambda: noop(rows.repartition(4, "k")))}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("jobs", "starved"), required=True)
    parser.add_argument("--event-log", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--screenshot", default="")
    args = parser.parse_args()
    options: Dict[str, object] = {"metrics_report_interval": "200ms"}
    if args.mode == "starved":
        # 64 KiB of buffers for the tasks (72 KiB less 8 KiB, two segments, of read memory): the least
        # an executor of two task slots accepts with 11 exclusive buffers per channel, uncompressed.
        # A starting reduce gate takes 13 of the 16 (its floating minimum, one scratch segment and 11
        # exclusive ones), so an executor's second reduce task waits for its first.
        options.update(network_memory="72k", read_memory="8k", segment_size="4k", buffers_per_channel=11)
    spark = build_session(
        f"sluice-batch-diagnosis-{args.mode}",
        "sluice",
        "local-cluster[2,1,1024]" if args.mode == "jobs" else "local-cluster[2,2,1024]",
        conf={
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": f"file://{args.event_log}",
            "spark.eventLog.compress": "false",
            "spark.sql.adaptive.enabled": "false",
            "spark.sql.shuffle.partitions": "8",
            "spark.shuffle.compress": "false",  # partition bytes in proportion to rows
        },
        options=options,
        log_level="WARN",
    )
    result = run_jobs(spark) if args.mode == "jobs" else run_starved(spark)
    executors: List[Any] = sluice.executors(spark).to_pylist()  # waits until the executors reported everything
    time.sleep(1.0)  # Spark's task-end events reach Sluice's listener on the listener bus
    stages = sluice.stages(spark, wait=False)
    job = result["groups"][next(iter(result["groups"]))]["jobs"][0]
    url = f"{ui_url(spark)}/sluice/"
    result.update(
        app_id=spark.sparkContext.applicationId,
        stages=stages.to_pylist(),
        stages_of_job={"job": job, "stages": sluice.stages(spark, job_id=job, wait=False).to_pylist()},
        metrics=sluice.metrics(spark, wait=False)
        .select(
            [
                "stage_id",
                "partition_id",
                "executor_id",
                "running",
                "started_at_ms",
                "stage_name",
                "job_ids",
                "job_group",
                "buffer_wait_ms",
                "input_wait_by_producer_ms",
                "numRecordsIn",
            ]
        )
        .to_pylist(),
        executors=executors,
        json=http_json(f"{ui_url(spark)}/sluice/json"),
        html=http_get(url),
    )
    if args.screenshot:
        from test_ui import run_chromium, screenshot

        for _ in range(3):  # a loaded machine's Chromium sometimes gives up before the page loads
            result["dom"] = run_chromium(["--dump-dom", url])
            if 'id="sluice-batch"' in result["dom"]:
                break
        result["screenshot"] = str(screenshot(url, Path(args.screenshot)))
    write_json(args.out, result)
    time.sleep(1.0)  # the stage figures posted by then reach the event log
    spark.stop()


if __name__ == "__main__":
    main()
