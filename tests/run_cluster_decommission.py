"""Decommissions a whole worker host of the multi-host test cluster (see test_cluster.py) while the
Sluice map outputs of a job live on it, and writes what happened as JSON.

One 1-core executor per worker host. The map stage of one shuffle runs alone
(``SparkContext.submitMapStage``, through the test jar); then the Worker of the host whose
executor holds the most map outputs gets SIGPWR (spark.worker.decommission.signal): it tells the
Master, which marks the worker DECOMMISSIONED and has the application decommission that host's
executor. Its BlockManager moves the finished partitions to the executor on the other host
through Sluice's block resolver, and it exits once they are moved. Then the reduce stage runs.
Recorded: the answer next to the expected one, where the map outputs live before and after
(the driver's MapOutputTracker), the Master's view of the workers, and Spark's record of the
stages that ran.

Run in the driver host:
    python tests/run_cluster_decommission.py --out r.json --test-jar build/test-libs/sluice-tests.jar \\
        --worker NS=ADDRESS --worker NS=ADDRESS --master-ui http://10.77.0.2:8080
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import realapps  # noqa: E402
import sessions  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from realapps import keyed, sums_by_key  # noqa: E402

N = 300_000
KEYS = 997
MAPS = 6
REDUCERS = 4


def executor_hosts(spark: SparkSession) -> Dict[str, str]:
    """executor id -> host address of the live executors (Spark's REST API)."""
    return {e["id"]: e["hostPort"].rsplit(":", 1)[0] for e in sessions.rest(spark, "executors") if e["id"] != "driver"}


def at_least(executors: Dict[str, str], n: int) -> Dict[str, str]:
    return executors if len(executors) >= n else {}


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--test-jar", required=True, help="build/test-libs/sluice-tests.jar")
    parser.add_argument("--worker", action="append", required=True, help="a worker host: NAMESPACE=ADDRESS")
    parser.add_argument("--master-ui", required=True, help="the standalone Master's web UI, http://host:port")
    args = parser.parse_args(argv)
    workers = dict(w.split("=", 1)[::-1] for w in args.worker)  # address -> namespace

    import sluice
    from sluice.config import append_to_list

    builder = (
        SparkSession.builder.master(os.environ["SLUICE_CLUSTER_MASTER"])
        .appName("sluice-cluster-decommission")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", "768m")
        .config("spark.decommission.enabled", "true")
        .config("spark.storage.decommission.enabled", "true")
        .config("spark.storage.decommission.shuffleBlocks.enabled", "true")
        .config("spark.storage.decommission.rddBlocks.enabled", "false")
        # How often the decommissioning executor looks for blocks left to move (default 30s).
        .config("spark.storage.decommission.replicationReattemptInterval", "1s")
    )
    builder = sluice.configure(builder)
    builder = builder.config("spark.jars", append_to_list(str(builder._options["spark.jars"]), [args.test_jar]))
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    result: Dict[str, Any] = {"expected": realapps.expected_sums(N, KEYS)}
    try:
        hosts = realapps.wait_for(lambda: at_least(executor_hosts(spark), len(workers)), 240, interval=0.5)
        assert hosts, f"fewer than {len(workers)} executors registered within 240 s: {executor_hosts(spark)}"
        result["executorsBefore"] = hosts

        pairs = sc.parallelize(range(N), MAPS).map(lambda x: keyed(x, KEYS))
        shuffled = pairs.partitionBy(REDUCERS)  # one shuffle, no map-side combine: every row moves
        jvm = sc._jvm
        assert jvm is not None
        sc.setJobGroup("map", "map")
        shuffle_id = jvm.org.apache.spark.shuffle.sluice.TestingMapOutputs.runMapStage(shuffled._jrdd.rdd())
        before = realapps.map_locations(spark, shuffle_id)
        by_executor: Dict[str, int] = {}
        for loc in before:
            by_executor[loc["executor"]] = by_executor.get(loc["executor"], 0) + 1
        victim = max(sorted(by_executor), key=lambda e: by_executor[e])
        victim_host = hosts[victim]

        # The whole worker host goes: its Worker gets SIGPWR.
        started = time.monotonic()
        result["signalled"] = realapps.dev_cluster().decommission_worker(workers[victim_host])
        gone = realapps.wait_for(lambda: victim not in executor_hosts(spark), 240, interval=0.2)
        assert gone, f"executor {victim} on {victim_host} was still running 240 s after its Worker got SIGPWR"
        result["decommissionSeconds"] = round(time.monotonic() - started, 1)
        after = realapps.map_locations(spark, shuffle_id)
        master = sessions.http_json(f"{args.master_ui}/json")
        result["masterWorkers"] = {w["host"]: w["state"] for w in master.get("workers", [])}

        sc.setJobGroup("reduce", "reduce")
        reduce_start = time.monotonic()
        got = dict(shuffled.mapPartitions(sums_by_key).collect())
        result["reduceSeconds"] = round(time.monotonic() - reduce_start, 1)

        # What Spark's status tracker saw, once the listener bus has delivered both jobs' ends.
        result.update(realapps.jobs_and_stages(spark, ("map", "reduce")))
        result.update(
            {
                "victim": victim,
                "victimHost": victim_host,
                "before": before,
                "after": after,
                "executorsAfter": executor_hosts(spark),
                "got": sorted([k, list(v)] for k, v in got.items()),
                # Every stage attempt, with its tasks' failure reasons (none expected).
                "attempts": realapps.stage_attempts(spark),
            }
        )
    finally:
        spark.stop()
    sessions.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
