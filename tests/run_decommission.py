"""Decommissions an executor that holds Sluice map outputs between the map stage and the reduce
stage, and prints what happened as JSON. Run in its own process (see test_decommission.py):
``python tests/run_decommission.py --out result.json --test-jar build/test-libs/sluice-tests.jar``.

Three 1-core executors; the map stage of one shuffle runs alone (``SparkContext.submitMapStage``);
then the executor holding the most map outputs gets SIGPWR, which makes Spark decommission it
(spark.decommission.enabled): its BlockManager moves its shuffle blocks to the other executors
through Sluice's block resolver, and it exits once they are moved. Then the reduce stage runs.
The script records the answer next to the expected one, where the map outputs live before and
after, and what Spark's status tracker says about the stages that ran.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Dict, Iterable, Iterator, List, Tuple

from pyspark.sql import SparkSession

N = 300_000
KEYS = 997
MAPS = 6
REDUCERS = 4


def executor_pid(app_id: str, executor_id: str) -> int:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        args = line.split()
        if "CoarseGrainedExecutorBackend" in line and app_id in line and "--executor-id" in args:
            if args[args.index("--executor-id") + 1] == executor_id:
                return int(args[0])
    raise RuntimeError(f"no JVM of executor {executor_id} of {app_id}")


def map_locations(spark: SparkSession, shuffle_id: int) -> List[Dict[str, Any]]:
    """Where the driver's MapOutputTracker says each map output lives (through the test jar)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    out: List[Dict[str, Any]] = []
    for line in str(jvm.org.apache.spark.shuffle.sluice.TestingMapOutputs.locations(shuffle_id)).splitlines():
        if line == "-":
            out.append({"missing": True})
        else:
            map_id, executor, *topology = line.split(" ")
            out.append({"mapId": int(map_id), "executor": executor, "topology": " ".join(topology)})
    return out


def active_executors(spark: SparkSession) -> List[str]:
    return str(spark.sparkContext._jsc.sc().getExecutorIds().mkString(",")).split(",")  # type: ignore[union-attr]


def sums_by_key(rows: Iterable[Tuple[int, int]]) -> Iterator[Tuple[int, Tuple[int, int]]]:
    acc: Dict[int, List[int]] = {}
    for k, v in rows:
        a = acc.setdefault(k, [0, 0])
        a[0] += v
        a[1] += 1
    for k, (s, c) in acc.items():
        yield k, (s, c)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--test-jar", required=True, help="build/test-libs/sluice-tests.jar")
    parser.add_argument(
        "--no-shuffle-migration",
        action="store_true",
        help="spark.storage.decommission.shuffleBlocks.enabled=false (the control: outputs are lost)",
    )
    args = parser.parse_args(argv)

    import sluice
    from sluice.config import append_to_list

    builder = (
        SparkSession.builder.master("local-cluster[3,1,1024]")
        .appName("sluice-decommission")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", "700m")
        .config("spark.decommission.enabled", "true")
        .config("spark.storage.decommission.enabled", "true")
        .config("spark.storage.decommission.shuffleBlocks.enabled", str(not args.no_shuffle_migration).lower())
        .config("spark.storage.decommission.rddBlocks.enabled", "false")
        # How often the decommissioning executor looks for blocks left (default 30s).
        .config("spark.storage.decommission.replicationReattemptInterval", "1s")
    )
    builder = sluice.configure(builder)
    builder = builder.config("spark.jars", append_to_list(str(builder._options["spark.jars"]), [args.test_jar]))
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    result: Dict[str, Any] = {}
    try:
        pairs = sc.parallelize(range(N), MAPS).map(lambda x: ((x * 7919) % KEYS, x))
        shuffled = pairs.partitionBy(REDUCERS)  # one shuffle, no map-side combine: every row moves
        jvm = sc._jvm
        assert jvm is not None
        shuffle_id = jvm.org.apache.spark.shuffle.sluice.TestingMapOutputs.runMapStage(shuffled._jrdd.rdd())
        before = map_locations(spark, shuffle_id)
        by_executor: Dict[str, int] = {}
        for loc in before:
            by_executor[loc["executor"]] = by_executor.get(loc["executor"], 0) + 1
        victim = max(sorted(by_executor), key=lambda e: by_executor[e])

        os.kill(executor_pid(sc.applicationId, victim), signal.SIGPWR)
        start = time.monotonic()
        while victim in active_executors(spark):
            if time.monotonic() - start > 180:
                raise RuntimeError(f"executor {victim} was still running 180 s after SIGPWR")
            time.sleep(0.2)
        result["decommissionSeconds"] = round(time.monotonic() - start, 1)
        after = map_locations(spark, shuffle_id)

        reduce_start = time.monotonic()
        got = dict(shuffled.mapPartitions(sums_by_key).collect())
        result["reduceSeconds"] = round(time.monotonic() - reduce_start, 1)

        expected: Dict[int, List[int]] = {}
        for x in range(N):
            e = expected.setdefault((x * 7919) % KEYS, [0, 0])
            e[0] += x
            e[1] += 1
        # What Spark's status tracker saw, once the listener bus has delivered both jobs' ends.
        tracker = sc.statusTracker()
        deadline = time.monotonic() + 120
        while True:
            jobs = [tracker.getJobInfo(j) for j in sorted(tracker.getJobIdsForGroup())]
            if len(jobs) >= 2 and all(j is not None and j.status != "RUNNING" for j in jobs):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the status tracker did not see both jobs end: {jobs}")
            time.sleep(0.2)
        stages = []
        for stage_id in sorted({s for j in jobs if j is not None for s in j.stageIds}):
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                stages.append(
                    {
                        "id": stage_id,
                        "attempt": info.currentAttemptId,
                        "numTasks": info.numTasks,
                        "completedTasks": info.numCompletedTasks,
                        "failedTasks": info.numFailedTasks,
                    }
                )
        result.update(
            {
                "victim": victim,
                "before": before,
                "after": after,
                "executorsAfter": active_executors(spark),
                "got": sorted([k, list(v)] for k, v in got.items()),
                "expected": sorted([k, v] for k, v in expected.items()),
                "jobs": [
                    {"id": j.jobId, "status": j.status, "stageIds": list(j.stageIds)} for j in jobs if j is not None
                ],
                "stages": stages,
            }
        )
    finally:
        spark.stop()
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
