"""Decommissions the only executor of a Sluice application between its map and reduce stage, with
no peer to take its map outputs: Spark's fallback storage (a local path here, any Hadoop file system
in production) holds them, and a new executor reads them back. Writes what happened as JSON.

``local-cluster[1,1,1024]``: one 1-core executor. The map stage of one shuffle runs alone
(``SparkContext.submitMapStage``, through the test jar); then the executor gets SIGPWR
(``spark.executor.decommission.signal``, as Kubernetes and standalone Workers send it): its
BlockManager hands every map output to the fallback storage (no live peer), Sluice copies the
partition files there, and the executor exits. The standalone master starts a new executor, and
the reduce stage runs on it. Recorded: the answer next to the expected one, where the driver's
MapOutputTracker has the map outputs before and after, the files in the fallback storage while the
application runs, and Spark's record of the stages that ran. The test checks the fallback storage
after the application ended.

    python tests/run_fallback_storage.py --out r.json --fallback DIR --test-jar build/test-libs/sluice-tests.jar
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import realapps  # noqa: E402
import sessions  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from realapps import keyed, sums_by_key  # noqa: E402

N = 120_000
KEYS = 211
MAPS = 5
REDUCERS = 3


def executors(spark: SparkSession) -> List[str]:
    """The ids of the live executors (Spark's REST API)."""
    return sorted(e["id"] for e in sessions.rest(spark, "executors") if e["id"] != "driver")


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--fallback", required=True, help="the fallback storage's directory")
    parser.add_argument("--test-jar", required=True, help="build/test-libs/sluice-tests.jar")
    args = parser.parse_args(argv)
    fallback = Path(args.fallback)

    spark = sessions.build_session(
        "sluice-fallback-storage",
        "sluice",
        "local-cluster[1,1,1024]",
        conf={
            "spark.decommission.enabled": "true",
            "spark.storage.decommission.enabled": "true",
            "spark.storage.decommission.shuffleBlocks.enabled": "true",
            "spark.storage.decommission.rddBlocks.enabled": "false",
            # How often the decommissioning executor looks for blocks left to move (default 30s).
            "spark.storage.decommission.replicationReattemptInterval": "1s",
            # Spark wants the path to end with a separator. cleanUp stays at its default (false).
            "spark.storage.decommission.fallbackStorage.path": f"{fallback.resolve()}/",
        },
        jars=[args.test_jar],
        log_level="WARN",
    )
    sc = spark.sparkContext
    result: Dict[str, Any] = {"expected": realapps.expected_sums(N, KEYS), "app_id": sc.applicationId}
    try:
        first = realapps.wait_for(lambda: executors(spark) or None, 240, interval=0.5)
        assert first, "no executor registered within 240 s"
        result["executorsBefore"] = first

        pairs = sc.parallelize(range(N), MAPS).map(lambda x: keyed(x, KEYS))
        shuffled = pairs.partitionBy(REDUCERS)  # one shuffle, no map-side combine: every row moves
        jvm = sc._jvm
        assert jvm is not None
        sc.setJobGroup("map", "map")
        shuffle_id = jvm.org.apache.spark.shuffle.sluice.TestingMapOutputs.runMapStage(shuffled._jrdd.rdd())
        result["before"] = realapps.map_locations(spark, shuffle_id)

        # The only executor is decommissioned: no peer is left to take its map outputs.
        pids = sessions.own_executor_pids(spark)
        assert len(pids) == 1, pids
        started = time.monotonic()
        os.kill(pids[0], signal.SIGPWR)
        gone = realapps.wait_for(lambda: not set(first) & set(executors(spark)), 240, interval=0.2)
        assert gone, f"executor {first} was still running 240 s after SIGPWR"
        result["decommissionSeconds"] = round(time.monotonic() - started, 1)
        result["after"] = realapps.map_locations(spark, shuffle_id)
        app_dir = fallback / sc.applicationId
        result["fallbackFiles"] = sorted(
            str(p.relative_to(app_dir)) for p in app_dir.rglob("*") if p.is_file() and not p.name.endswith(".crc")
        )
        result["shuffleId"] = shuffle_id
        replacement = realapps.wait_for(lambda: [e for e in executors(spark) if e not in first] or None, 240, 0.5)
        assert replacement, "no new executor started within 240 s of the decommissioning"
        result["executorsAfter"] = replacement

        sc.setJobGroup("reduce", "reduce")
        got = dict(shuffled.mapPartitions(sums_by_key).collect())
        result["got"] = sorted([k, list(v)] for k, v in got.items())

        # What Spark's status tracker saw, once the listener bus has delivered both jobs' ends.
        result.update(realapps.jobs_and_stages(spark, ("map", "reduce")))
        # Every stage attempt, with its tasks' failure reasons (none expected).
        result["attempts"] = realapps.stage_attempts(spark)
    finally:
        spark.stop()
    sessions.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
