"""Failures on the multi-host test cluster (see test_cluster.py), each while the reduce stage of a
Sluice shuffle reads: a worker's executor SIGKILLed (its connections reset), then another worker
host cut off (its link taken down at the bridge: no RST, no FIN, a hung peer: its executor and,
with ``--node-service``, its Sluice shuffle service). Spark's default failure limits; shorter
network timeouts so the hung peer is noticed in seconds. Writes, per failure, the answer next to
the expected one and every attempt of the job's stages with the executors of their tasks (Spark's
REST API), so the test can check what Spark recomputed: with ``--node-service``
(spark.sluice.service.enabled) the killed executor's map outputs are served by its host's service
and nothing is recomputed; the cut-off host's are lost and a FetchFailed recomputes them. The link
is restored before the application stops, so every service hears that it ended.

Run in the driver host:
    python tests/run_cluster_failures.py --out r.json --marks DIR --kill-ns NS --kill-reader ADDRESS \\
        --bridge-ns NS --cut-link v-w2 --cut-reader ADDRESS [--node-service]
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import realapps  # noqa: E402
import sessions  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

N = 400_000
KEYS = 1_000


def query(spark: SparkSession) -> DataFrame:
    # Each row carries 64 bytes of hash, so a reduce task's input from the other host (about 6 MB)
    # is far more than its channels' buffers hold: it is still reading when the failure comes.
    rows = spark.range(0, N, 1, 8).select(
        ((F.col("id") * 7919) % KEYS).alias("k"), F.col("id"), F.sha2(F.col("id").cast("string"), 256).alias("h")
    )
    # A 20 ms pause every 500 rows, evaluated in the JVM as the reduce task pulls its input, so the
    # failure lands while the reduce tasks hold open channels.
    pause = F.when(F.col("id") % 500 == 0, F.expr("reflect('java.lang.Thread', 'sleep', cast(id * 0 + 20 as bigint))"))
    # One row in 4999 (spread over every key, so over every reduce partition) leaves a file
    # reading-<host address>-*.mark in the executors' java.io.tmpdir (--marks) as a reduce task
    # reads it: the sign that a reduce task on that host is reading its input. (Executors inherit
    # their worker's SPARK_LOCAL_IP.)
    mark = F.when(
        F.col("id") % 4_999 == 7,
        F.expr(
            "reflect('java.io.File', 'createTempFile', "
            "concat('reading-', reflect('java.lang.System', 'getenv', 'SPARK_LOCAL_IP'), '-'), '.mark')"
        ),
    )
    side_effects = F.coalesce(F.length(pause), F.lit(0)) + F.coalesce(F.length(mark), F.lit(0))
    slow = rows.repartition(4, "k").select("k", (F.col("id") + side_effects * 0).alias("id"), F.length("h").alias("n"))
    return slow.groupBy("k").agg(F.sum("id").alias("s"), F.sum("n").alias("n"))


def expected() -> List[List[int]]:
    sums: Dict[int, int] = {}
    for i in range(N):
        k = (i * 7919) % KEYS
        sums[k] = sums.get(k, 0) + i
    counts: Dict[int, int] = {}
    for i in range(N):
        counts[(i * 7919) % KEYS] = counts.get((i * 7919) % KEYS, 0) + 64
    return sorted([k, v, counts[k]] for k, v in sums.items())


def live_executors(spark: SparkSession) -> List[Dict[str, Any]]:
    return [e for e in sessions.rest(spark, "executors") if e["id"] != "driver"]


def when_reading(marks: str, reader: str, action: Callable[[], Any], state: Dict[str, Any]) -> None:
    """Runs ``action`` as soon as a reduce task on host ``reader`` has left a mark (it is reading)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if any(name.startswith(f"reading-{reader}-") and name.endswith(".mark") for name in os.listdir(marks)):
            state["acted_at"] = time.monotonic()
            state["acted_at_epoch_ms"] = int(time.time() * 1000)
            state["action"] = action()
            return
        time.sleep(0.05)


def kill_executor(ns: str) -> Any:
    """SIGKILLs the executor in ``ns``; its pid and executor id."""
    pids = realapps.dev_cluster().executor_pids(ns)
    if not pids:
        return None
    argv = realapps.dev_cluster().cmdline(pids[0]).split()
    executor = argv[argv.index("--executor-id") + 1] if "--executor-id" in argv else None
    os.kill(pids[0], signal.SIGKILL)
    return {"pid": pids[0], "executor": executor}


def cut_link(bridge_ns: str, link: str) -> Any:
    realapps.dev_cluster().set_link(bridge_ns, link, up=False)
    return link


def run_phase(spark: SparkSession, group: str, marks: str, reader: str, action: Callable[[], Any]) -> Dict[str, Any]:
    """Runs the query as job group ``group``, making the failure (``action``) once a reduce task on
    the host with address ``reader`` (one that survives the failure) is reading."""
    state: Dict[str, Any] = {}
    for name in os.listdir(marks):
        if name.endswith(".mark"):
            os.remove(os.path.join(marks, name))
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    thread = threading.Thread(target=when_reading, args=(marks, reader, action, state), daemon=True)
    thread.start()
    started = time.monotonic()
    got = sorted([r["k"], r["s"], r["n"]] for r in query(spark).collect())
    finished = time.monotonic()
    thread.join(timeout=5)
    attempts = []
    for stage_id in sessions.stages_of_group(spark, group):
        for attempt in sessions.rest(spark, f"stages/{stage_id}"):
            tasks = sessions.rest(spark, f"stages/{stage_id}/{attempt['attemptId']}/taskList?length=1000")
            attempts.append(
                {
                    "stage": stage_id,
                    "attempt": attempt["attemptId"],
                    "status": attempt["status"],
                    "failureReason": attempt.get("failureReason", ""),
                    "tasks": len(tasks),
                    "succeeded": sum(1 for t in tasks if t.get("status") == "SUCCESS"),
                    # The executors whose tasks succeeded (for a map stage: where its outputs were written).
                    "executors": sorted({str(t["executorId"]) for t in tasks if t.get("status") == "SUCCESS"}),
                    "taskErrors": [t.get("errorMessage", "")[:600] for t in tasks if t.get("status") == "FAILED"],
                    # When each failed task ended, in ms after the failure was made.
                    "taskFailedAfterMs": [
                        failed_at_ms(t) - state.get("acted_at_epoch_ms", 0)
                        for t in tasks
                        if t.get("status") == "FAILED"
                    ],
                }
            )
    return {
        "got": got,
        "acted": state.get("action"),
        "seconds": round(finished - started, 1),
        "seconds_after_action": round(finished - state["acted_at"], 1) if "acted_at" in state else None,
        "attempts": attempts,
    }


def failed_at_ms(task: Dict[str, Any]) -> int:
    """A finished task's end (epoch ms) from the REST API's launchTime ("2026-11-23T00:51:07.123GMT") and duration."""
    launched = datetime.datetime.strptime(task["launchTime"].replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
    return int(launched.timestamp() * 1000) + int(task.get("duration", 0))


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--kill-ns", help="the worker host whose executor is SIGKILLed")
    parser.add_argument("--kill-reader", help="the address of a worker host that reads from --kill-ns")
    parser.add_argument("--bridge-ns", help="the bridge host, where --cut-link is taken down")
    parser.add_argument("--cut-link")
    parser.add_argument("--cut-reader", help="the address of a worker host that reads from the cut-off one")
    parser.add_argument("--executors", type=int, default=2)
    parser.add_argument("--marks", required=True, help="an empty directory the executors can write to")
    parser.add_argument(
        "--node-service", action="store_true", help="map outputs served by each host's Sluice shuffle service"
    )
    args = parser.parse_args(argv)

    import sluice

    builder = (
        SparkSession.builder.master(os.environ["SLUICE_CLUSTER_MASTER"])
        .appName("sluice-cluster-failures")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", "768m")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        # A hung peer is noticed in seconds, not Spark's default two minutes: Sluice's heartbeat on
        # its connections, Spark's executor heartbeats and their check. A zombie reader of the
        # failed attempt may still try to connect to the cut-off host: Sluice's connect timeout
        # follows spark.network.timeout (no setting of its own here), so it gives up after 15 s
        # instead of holding the surviving worker's only task slot for two minutes.
        .config("spark.network.timeout", "15s")
        .config("spark.network.timeoutInterval", "2s")
        .config("spark.executor.heartbeatInterval", "2s")
        .config("spark.sluice.network.heartbeatTimeout", "6s")
        .config("spark.executor.extraJavaOptions", f"-Djava.io.tmpdir={args.marks}")
    )
    spark = sluice.configure(builder, service_enabled=args.node_service).getOrCreate()
    result: Dict[str, Any] = {"expected": expected(), "phases": {}, "app_id": spark.sparkContext.applicationId}
    try:
        deadline = time.monotonic() + 180
        while len(live_executors(spark)) < args.executors and time.monotonic() < deadline:
            time.sleep(0.5)
        result["executors_before"] = {e["id"]: e["hostPort"] for e in live_executors(spark)}
        if args.kill_ns:
            result["phases"]["kill"] = run_phase(
                spark, "kill", args.marks, args.kill_reader, lambda: kill_executor(args.kill_ns)
            )
            # The worker starts a replacement executor; wait for it so the next phase has two hosts.
            deadline = time.monotonic() + 180
            while len(live_executors(spark)) < args.executors and time.monotonic() < deadline:
                time.sleep(0.5)
            result["executors_between"] = {e["id"]: e["hostPort"] for e in live_executors(spark)}
        if args.cut_link:
            try:
                result["phases"]["cut"] = run_phase(
                    spark, "cut", args.marks, args.cut_reader, lambda: cut_link(args.bridge_ns, args.cut_link)
                )
            finally:
                # Back before the application stops: the cut-off host's service hears that it ended.
                realapps.dev_cluster().set_link(args.bridge_ns, args.cut_link, up=True)
    finally:
        spark.stop()
    sessions.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
