"""Dynamic allocation with shuffle tracking on the multi-host test cluster (see test_cluster.py).

Spark's ExecutorMonitor marks an executor as holding shuffle data when a map task of that shuffle
succeeds on it, and forgets it when the ContextCleaner removes the shuffle; that is where Sluice's
outputs live, so idle executors holding a live Sluice shuffle must stay, and must go once the
shuffle is cleaned. Then a new job must get new executors and the exact answer.

Launched the way a user submits an application: ``spark-submit $(sluice conf) --master ...`` in
the driver host (see test_cluster.py), so Sluice comes from ``sluice conf``'s arguments and this
script does not call ``sluice.configure``; it only adds its dynamic allocation settings.

    spark-submit $(sluice conf) --master "$SLUICE_CLUSTER_MASTER" \
        tests/run_cluster_dynamic_allocation.py --out r.json
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sessions  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

IDLE_TIMEOUT_S = 3


def executors(spark: SparkSession) -> List[str]:
    return sorted(e["id"] for e in sessions.rest(spark, "executors") if e["id"] != "driver")


def wait_for(spark: SparkSession, done: Any, timeout: float, collect_garbage: bool = False) -> List[str]:
    deadline = time.monotonic() + timeout
    live = executors(spark)
    while not done(live) and time.monotonic() < deadline:
        if collect_garbage:  # the ContextCleaner learns of dropped shuffles from the driver's GC
            gc.collect()
            spark.sparkContext._jvm.System.gc()  # type: ignore[union-attr]
        time.sleep(1.0)
        live = executors(spark)
    return live


def map_executors(spark: SparkSession, group: str) -> List[str]:
    """The executors that ran a successful map task of the group's shuffle (Spark's REST API)."""
    found = set()
    for stage in sessions.stages_of_group(spark, group)[:-1]:  # the last one is the result stage
        found |= {
            t["executorId"]
            for t in sessions.rest(spark, f"stages/{stage}/0/taskList?length=1000")
            if t["status"] == "SUCCESS"
        }
    return sorted(found)


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

    # Master, jar, shuffle managers and plugin: all from spark-submit's arguments.
    builder = (
        SparkSession.builder.appName("sluice-cluster-dynamic-allocation")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", "768m")
        .config("spark.dynamicAllocation.enabled", "true")
        .config("spark.dynamicAllocation.minExecutors", "0")
        .config("spark.dynamicAllocation.initialExecutors", "2")
        .config("spark.dynamicAllocation.maxExecutors", "2")
        .config("spark.dynamicAllocation.executorIdleTimeout", f"{IDLE_TIMEOUT_S}s")
        .config("spark.dynamicAllocation.schedulerBacklogTimeout", "1s")
    )
    spark = builder.getOrCreate()
    conf = spark.sparkContext.getConf()
    submitted = ("spark.master", "spark.jars", "spark.shuffle.manager", "spark.shuffle.manager.incremental")
    result: Dict[str, Any] = {key: conf.get(key, "") for key in (*submitted, "spark.plugins")}
    # Nothing here configured Sluice: the package was never imported.
    result["sluice_imported"] = "sluice" in sys.modules
    try:
        # No waiting for executors: idle ones go after the idle timeout, before or after the job.
        sc = spark.sparkContext
        sc.setJobGroup("first", "first")
        held = sums(spark, 200_000, 31)
        result["first"] = sorted([k, v] for k, v in held.collect()) == expected(200_000, 31)
        result["map_executors"] = map_executors(spark, "first")
        # Idle, but holding the live shuffle's outputs: kept well past the idle timeout.
        time.sleep(3 * IDLE_TIMEOUT_S)
        result["while_shuffle_lives"] = executors(spark)
        # Release the shuffle: drop every reference and let the driver's ContextCleaner see it.
        del held
        result["after_release"] = wait_for(spark, lambda live: not live, 90, collect_garbage=True)
        released_at = time.monotonic()
        # A new job asks for executors again; its answer is exact.
        again = sums(spark, 150_000, 37)
        result["second"] = sorted([k, v] for k, v in again.collect()) == expected(150_000, 37)
        result["second_seconds"] = round(time.monotonic() - released_at, 1)
        result["for_second"] = executors(spark)
    finally:
        spark.stop()
    sessions.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
