"""Two executors on one host with one fixed Sluice port base: both servers bind (the second one
retries upward past the first) and a shuffle between them is exact. Prints the ports the
executors' Sluice servers bound and the job's answer next to the expected one as JSON. Run in its
own process (see test_port_range.py): ``python tests/run_port_range.py --port 41000 --out r.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Dict, List

from pyspark.sql import functions as F
from sessions import APP_MASTER, build_session, http_json, ui_url, write_json

N = 200_000
KEYS = 100


def _servers(snapshot: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The executors (not the driver) whose Sluice server runs, from the driver's ``/sluice/json``."""
    return [e for e in snapshot.get("executors", []) if e["executor_id"] != "driver" and e.get("server_port")]


def _remote_bytes(snapshot: Dict[str, Any]) -> int:
    return sum(int(s.get("numBytesInRemote", 0)) for s in snapshot.get("stages", []))


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    with build_session("sluice-port-range", "sluice", APP_MASTER, options={"port": args.port}) as spark:
        spark.conf.set("spark.sql.adaptive.enabled", "false")
        spark.conf.set("spark.sql.shuffle.partitions", "4")
        rows = spark.range(0, N, 1, 8).groupBy((F.col("id") % KEYS).alias("k")).agg(F.sum("id").alias("s"))
        got = sorted([int(r["k"]), int(r["s"])] for r in rows.collect())
        expected = sorted([k, sum(range(k, N, KEYS))] for k in range(KEYS))
        # Both executors ran map and reduce tasks: each started its Sluice server, and the reduce
        # tasks read the other executor's outputs (remote bytes; metrics arrive with the reports).
        snapshot: Dict[str, Any] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            snapshot = http_json(ui_url(spark).rstrip("/") + "/sluice/json")
            if len(_servers(snapshot)) == 2 and _remote_bytes(snapshot) > 0:
                break
            time.sleep(0.5)
        write_json(
            args.out,
            {
                "ports": sorted(int(e["server_port"]) for e in _servers(snapshot)),
                "remote_bytes": _remote_bytes(snapshot),
                "got": got,
                "expected": expected,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
