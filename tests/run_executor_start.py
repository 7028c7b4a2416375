"""Sluice's network stack starts with the executor, not with its first shuffle task, on the port
base it is given: after a job without a shuffle, both executors (one host, one fixed
``spark.sluice.network.port``) already report a running Sluice server, on two ports at or above
the base, and a connection to the other's server (the driver named it in a report's reply), and
no task has used Sluice yet; a shuffle between them then runs on those same servers and
connections (no executor opens another) and is exact. Prints what it saw as JSON. Run in its own
process (see test_executor_start.py): ``python tests/run_executor_start.py --port 41000 --out r.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

from pyspark.sql import functions as F
from sessions import APP_MASTER, build_session, http_json, ui_url, write_json

N = 200_000
KEYS = 100


def _ports(snapshot: Dict[str, Any]) -> List[int]:
    """The ports of the executors' (not the driver's) running Sluice servers, from ``/sluice/json``."""
    return sorted(
        int(e["server_port"])
        for e in snapshot.get("executors", [])
        if e["executor_id"] != "driver" and e.get("server_port")
    )


def _connections(snapshot: Dict[str, Any], kind: str) -> List[int]:
    """Each executor's Sluice connections of ``kind`` (``client``: held to other servers; ``server``:
    accepted)."""
    return [int(e.get(f"{kind}_connections", 0)) for e in snapshot.get("executors", []) if e["executor_id"] != "driver"]


def _opened(snapshot: Dict[str, Any]) -> List[int]:
    """How many connections each executor's client opened since it started (a closed one opened
    again counts twice)."""
    return [
        int(e.get("client_connections_opened", 0))
        for e in snapshot.get("executors", [])
        if e["executor_id"] != "driver"
    ]


def _remote_bytes(snapshot: Dict[str, Any]) -> int:
    return sum(int(s.get("numBytesInRemote", 0)) for s in snapshot.get("stages", []))


def _executor_logs(spark: Any) -> List[str]:
    """The stderr of each of this application's executors (local-cluster keeps them in the
    Worker's work dir, ``$SPARK_HOME/work/<application>/<executor>/stderr``)."""
    from pyspark.find_spark_home import _find_spark_home

    app = Path(_find_spark_home()) / "work" / spark.sparkContext.applicationId
    return [p.read_text(errors="replace") for p in sorted(app.glob("*/stderr"))]


def _await(spark: Any, done: Callable[[Dict[str, Any]], bool], timeout_s: float = 60) -> Dict[str, Any]:
    """The driver's ``/sluice/json`` once ``done`` says so, or after ``timeout_s``."""
    snapshot: Dict[str, Any] = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        snapshot = http_json(ui_url(spark).rstrip("/") + "/sluice/json")
        if done(snapshot):
            break
        time.sleep(0.5)
    return snapshot


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    with build_session("sluice-executor-start", "sluice", APP_MASTER, options={"port": args.port}) as spark:
        spark.conf.set("spark.sql.adaptive.enabled", "false")
        spark.conf.set("spark.sql.shuffle.partitions", "4")
        # A job without a shuffle: no Sluice writer or reader runs.
        no_shuffle = sorted(int(r["id"]) for r in spark.range(0, 8, 1, 4).collect())
        # Each executor's figures come with its own report: the side that accepted a connection may
        # report it a tick after the side that opened it, so both sides are waited for.
        before = _await(
            spark,
            lambda s: (
                len(_ports(s)) == 2 and _connections(s, "client") == [1, 1] and _connections(s, "server") == [1, 1]
            ),
        )
        rows = spark.range(0, N, 1, 8).groupBy((F.col("id") % KEYS).alias("k")).agg(F.sum("id").alias("s"))
        got = sorted([int(r["k"]), int(r["s"])] for r in rows.collect())
        # Both executors ran map and reduce tasks, and the reduce tasks read the other executor's
        # outputs (remote bytes; metrics arrive with the executors' reports).
        after = _await(spark, lambda s: len(_ports(s)) == 2 and _remote_bytes(s) > 0)
        logs = _executor_logs(spark)
        write_json(
            args.out,
            {
                "checked_build": spark.sparkContext.getConf().get("spark.shuffle.sluice.checkedBuild"),
                "executors_that_checked_internals": sum("internals are as Sluice expects" in log for log in logs),
                "executors_that_skipped_the_check": sum("does not check again" in log for log in logs),
                "executor_logs": len(logs),
                "no_shuffle": no_shuffle,
                "ports_before_any_shuffle": _ports(before),
                "stages_before_any_shuffle": len(before.get("stages", [])),
                "client_connections_before_any_shuffle": _connections(before, "client"),
                "server_connections_before_any_shuffle": _connections(before, "server"),
                "client_connections_opened_before_any_shuffle": _opened(before),
                "client_connections_opened_after_a_shuffle": _opened(after),
                "ports_after_a_shuffle": _ports(after),
                "remote_bytes": _remote_bytes(after),
                "got": got,
                "expected": sorted([k, sum(range(k, N, KEYS))] for k in range(KEYS)),
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
