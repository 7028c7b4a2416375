"""Sluice's network stack starts with the executor, not with its first shuffle task: after a job
without a shuffle, both executors already report a running Sluice server and no task has used
Sluice yet; a shuffle then runs on those same servers. Prints what it saw as JSON. Run in its own
process (see test_executor_start.py): ``python tests/run_executor_start.py --out r.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Dict, List

from pyspark.sql import functions as F
from sessions import APP_MASTER, build_session, http_json, ui_url, write_json


def _ports(snapshot: Dict[str, Any]) -> List[int]:
    """The ports of the executors' (not the driver's) running Sluice servers, from ``/sluice/json``."""
    return sorted(
        int(e["server_port"])
        for e in snapshot.get("executors", [])
        if e["executor_id"] != "driver" and e.get("server_port")
    )


def _await_servers(spark: Any, timeout_s: float = 60) -> Dict[str, Any]:
    snapshot: Dict[str, Any] = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        snapshot = http_json(ui_url(spark).rstrip("/") + "/sluice/json")
        if len(_ports(snapshot)) == 2:
            break
        time.sleep(0.5)
    return snapshot


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    with build_session("sluice-executor-start", "sluice", APP_MASTER) as spark:
        spark.conf.set("spark.sql.adaptive.enabled", "false")
        # A job without a shuffle: no Sluice writer or reader runs.
        no_shuffle = sorted(int(r["id"]) for r in spark.range(0, 8, 1, 4).collect())
        before = _await_servers(spark)
        rows = spark.range(0, 10_000, 1, 4).groupBy((F.col("id") % 10).alias("k")).count().collect()
        after = _await_servers(spark)
        write_json(
            args.out,
            {
                "no_shuffle": no_shuffle,
                "ports_before_any_shuffle": _ports(before),
                "stages_before_any_shuffle": len(before.get("stages", [])),
                "ports_after_a_shuffle": _ports(after),
                "counts": sorted([int(r["k"]), int(r["count"])] for r in rows),
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
