"""Dynamic allocation without shuffle tracking on the multi-host test cluster (see test_cluster.py),
Sluice's map outputs served by each worker host's Sluice shuffle service.

With spark.sluice.service.enabled, Sluice's storage plugin tells Spark that map outputs outlive
their executors (ShuffleDriverComponents.supportsReliableStorage), so dynamic allocation runs with
spark.dynamicAllocation.shuffleTracking.enabled=false: an executor idle past
spark.dynamicAllocation.executorIdleTimeout goes although the shuffle it wrote is alive. Then
a second job over the same shuffle reads those outputs (its map stage skipped) on new executors
through the services, and its answer must be exact.

Launched the way a user submits an application: ``spark-submit $(sluice conf --service-enabled
true) --master ...`` in the driver host (see test_cluster.py), so Sluice comes from ``sluice
conf``'s arguments and this script does not call ``sluice.configure``; it only adds its dynamic
allocation settings.

    spark-submit $(sluice conf --service-enabled true) --master "$SLUICE_CLUSTER_MASTER" \
        tests/run_cluster_dynamic_allocation.py --out r.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sessions  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

IDLE_TIMEOUT_S = 3
# How long the idle executors get to go (the idle timeout, and a loaded machine's delays).
RELEASE_TIMEOUT_S = 120


def executors(spark: SparkSession) -> List[str]:
    return sorted(e["id"] for e in sessions.rest(spark, "executors") if e["id"] != "driver")


def wait_for(spark: SparkSession, done: Any, timeout: float) -> List[str]:
    """The live executors once ``done(live)`` holds, or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    live = executors(spark)
    while not done(live) and time.monotonic() < deadline:
        time.sleep(0.5)
        live = executors(spark)
    return live


def job_of_group(spark: SparkSession, group: str) -> Dict[str, Any]:
    """The one job of job group ``group``, as Spark's REST API reports it (tasks, skipped stages)."""
    (job,) = spark.sparkContext.statusTracker().getJobIdsForGroup(group)
    found: Dict[str, Any] = sessions.rest(spark, f"jobs/{job}")
    return found


def task_executors(spark: SparkSession, stage: int) -> List[str]:
    """The executors that ran a successful task of ``stage``'s first attempt (Spark's REST API)."""
    tasks = sessions.rest(spark, f"stages/{stage}/0/taskList?length=1000")
    return sorted({str(t["executorId"]) for t in tasks if t["status"] == "SUCCESS"})


def sums(spark: SparkSession, n: int, seed: int) -> Any:
    return (
        spark.sparkContext.parallelize(range(n), 6)
        .map(lambda i: ((i * seed) % 97, i))
        .reduceByKey(lambda a, b: a + b, numPartitions=4)
    )


def expected(n: int, seed: int) -> List[List[int]]:
    out: Dict[int, int] = {}
    for i in range(n):
        out[(i * seed) % 97] = out.get((i * seed) % 97, 0) + i
    return sorted([k, v] for k, v in out.items())


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    # Master, jar, shuffle managers, plugin, storage plugin and the service: from spark-submit's arguments.
    builder = (
        SparkSession.builder.appName("sluice-cluster-dynamic-allocation")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", "768m")
        .config("spark.dynamicAllocation.enabled", "true")
        .config("spark.dynamicAllocation.shuffleTracking.enabled", "false")
        .config("spark.dynamicAllocation.minExecutors", "0")
        .config("spark.dynamicAllocation.initialExecutors", "2")
        .config("spark.dynamicAllocation.maxExecutors", "2")
        .config("spark.dynamicAllocation.executorIdleTimeout", f"{IDLE_TIMEOUT_S}s")
        .config("spark.dynamicAllocation.schedulerBacklogTimeout", "1s")
    )
    spark = builder.getOrCreate()
    conf = spark.sparkContext.getConf()
    submitted = (
        "spark.master",
        "spark.jars",
        "spark.shuffle.manager",
        "spark.shuffle.manager.incremental",
        "spark.shuffle.sort.io.plugin.class",
        "spark.sluice.service.enabled",
    )
    result: Dict[str, Any] = {key: conf.get(key, "") for key in (*submitted, "spark.plugins")}
    result["app_id"] = spark.sparkContext.applicationId
    # Nothing here configured Sluice: the package was never imported.
    result["sluice_imported"] = "sluice" in sys.modules
    try:
        sc = spark.sparkContext
        sc.setJobGroup("first", "first")
        held = sums(spark, 200_000, 31)
        result["first"] = sorted([k, v] for k, v in held.collect()) == expected(200_000, 31)
        first = job_of_group(spark, "first")
        map_stage, reduce_stage = sorted(first["stageIds"])
        result["map_executors"] = task_executors(spark, map_stage)
        # Idle, holding the outputs of a shuffle that is still alive (held): released all the same.
        idle_from = time.monotonic()
        result["while_shuffle_lives"] = wait_for(
            spark, lambda live: not set(live) & set(result["map_executors"]), RELEASE_TIMEOUT_S
        )
        result["released_after_s"] = round(time.monotonic() - idle_from, 1)
        # The same shuffle read again: its map stage is skipped, new executors read the released
        # executors' outputs from the hosts' services.
        sc.setJobGroup("again", "again")
        result["again"] = sorted([k, v] for k, v in held.collect()) == expected(200_000, 31)
        again = job_of_group(spark, "again")
        result["again_job"] = {
            k: again.get(k)
            for k in (
                "status",
                "numTasks",
                "numCompletedTasks",
                "numFailedTasks",
                "numSkippedTasks",
                "numSkippedStages",
            )
        }
        new_stages = [s for s in again["stageIds"] if s not in (map_stage, reduce_stage)]
        result["again_executors"] = sorted({e for s in new_stages for e in task_executors(spark, s)})
        result["attempts"] = [
            {"stage": int(s["stageId"]), "attempt": int(s["attemptId"]), "status": s["status"]}
            for s in sessions.rest(spark, "stages")
        ]
    finally:
        spark.stop()
    sessions.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
