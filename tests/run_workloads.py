"""Runs the workloads of ``workloads.py`` in one Spark application and writes their answers as JSON.

Run in its own process, because a Python process can start Spark's driver JVM only once:

    python tests/run_workloads.py --shuffle sluice --out answers.json [--option buffer_timeout=0]
    spark-submit --properties-file f.conf tests/run_workloads.py --shuffle preconfigured --out ...

``--shuffle sort`` uses Spark's sort shuffle (the reference), ``sluice`` configures Sluice with
``sluice.configure``, ``preconfigured`` takes every setting from spark-submit. Besides the answers,
the output records which shuffle files appeared in the local dirs (``SPARK_LOCAL_DIRS``) and
Sluice's own network counters, so a test can tell which shuffle carried the data.

``--probe-secret S`` (needs the test jar in ``spark.jars``) then runs a shuffle of known records
and asks the executors' Sluice ports for one of its reduce partitions from outside the
application (``TestingDataPlaneProbe``): with no secret, a wrong one, and ``S``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sessions  # noqa: E402
import workloads  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from sessions import APP_MASTER, build_session, write_json  # noqa: E402


def shuffle_files(root: str) -> Dict[str, List[str]]:
    found: Dict[str, List[str]] = {"sort": [], "sluice": []}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name.startswith("shuffle_") and name.endswith(".data"):
                found["sort"].append(os.path.join(dirpath, name))
            elif name.startswith("sluice-shuffle-") and name.endswith(".part"):
                found["sluice"].append(os.path.join(dirpath, name))
    return found


def files_containing(paths: List[str], marker: str) -> List[str]:
    """The files among ``paths`` whose bytes contain ``marker`` (files deleted meanwhile are skipped)."""
    needle = marker.encode("utf-8")
    found = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                if needle in f.read():
                    found.append(path)
        except FileNotFoundError:
            pass
    return found


FAN_IN = (
    "numInputGates",
    "numInputChannels",
    "numPartitionRequests",
    "numControlMessages",
    "numBuffersInLocal",
    "numBuffersInRemote",
)


def sluice_counters(spark: SparkSession) -> Dict[str, Any]:
    """Sluice's totals over every task, and (``readers``) each reading task's fan-in metrics; an
    ``error`` entry when they could not be read (the tests of Sluice runs fail on it)."""
    try:
        import sluice

        table = sluice.metrics(spark)
        totals: Dict[str, Any] = {}
        for name in (
            "numRecordsOut",
            "numRecordsIn",
            "numBytesOut",
            "numBytesIn",
            "numBytesInLocal",
            "numBytesInRemote",
        ):
            totals[name] = int(sum(v or 0 for v in table.column(name).to_pylist()))
        rows = table.select(["stage_id", "task_attempt_id", *FAN_IN]).to_pylist()
        totals["readers"] = [r for r in rows if (r["numInputChannels"] or 0) > 0]
        return totals
    except Exception as e:  # reported, and asserted on by the tests of Sluice runs
        return {"error": repr(e)}


def probe_data_plane(spark: SparkSession, secret: str) -> Dict[str, Any]:
    """Runs TestingDataPlaneProbe's shuffle and probes reduce partition 3 with each kind of secret."""
    probe = spark._jvm.org.apache.spark.shuffle.sluice.TestingDataPlaneProbe
    sc = spark._jsc.sc()
    shuffle = json.loads(probe.runShuffle(sc))
    reduce = 3
    result: Dict[str, Any] = {"shuffle": shuffle, "reduce": reduce}
    for name, key in (("none", None), ("wrong", "not-" + secret), ("right", secret)):
        started = time.monotonic()
        result[name] = json.loads(probe.probe(sc, shuffle["shuffleId"], reduce, key))
        result[name]["seconds"] = round(time.monotonic() - started, 2)
    probe.release(shuffle["shuffleId"])
    return result


def executor_hosts(spark: SparkSession) -> Dict[str, str]:
    """executor id -> host of the application's live executors (Spark's REST API)."""
    return {e["id"]: e["hostPort"].rsplit(":", 1)[0] for e in sessions.rest(spark, "executors") if e["id"] != "driver"}


def hold(path: str, timeout: float = 180.0) -> None:
    open(path + ".ready", "w").close()
    deadline = time.monotonic() + timeout
    while not os.path.exists(path + ".done") and time.monotonic() < deadline:
        time.sleep(0.2)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shuffle", choices=["sort", "sluice", "preconfigured"], required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--option", action="append", default=[], help="a Sluice option, name=value")
    parser.add_argument("--conf", action="append", default=[], help="a Spark setting, key=value")
    parser.add_argument("--workloads", default=",".join(workloads.WORKLOADS))
    parser.add_argument(
        "--tpch-data", help="a directory of TPC-H tables (parquet): the tpch_* workloads read them from there"
    )
    parser.add_argument("--marker", help="also report the shuffle files whose bytes contain this string")
    parser.add_argument(
        "--probe-secret",
        default=None,
        help="afterwards, probe the executors' Sluice ports (test jar) with no, a wrong and this secret",
    )
    parser.add_argument(
        "--hold",
        help="before stopping Spark, create HOLD.ready and wait (up to 180 s) "
        "for HOLD.done, so a test can look at the executors' connections",
    )
    args = parser.parse_args(argv)

    options = dict(o.split("=", 1) for o in args.option)
    conf = dict(c.split("=", 1) for c in args.conf)
    master = None if args.shuffle == "preconfigured" else APP_MASTER
    available = {**workloads.WORKLOADS, **workloads.EXTRA_WORKLOADS}
    if args.tpch_data:
        available.update(workloads.tpch_workloads(args.tpch_data))
    result: Dict[str, Any] = {"answers": {}, "errors": {}, "seconds": {}}
    with build_session(f"sluice-workloads-{args.shuffle}", args.shuffle, master, options=options, conf=conf) as spark:
        result["shuffle_manager"] = spark.sparkContext.getConf().get("spark.shuffle.manager", "sort")
        for name in args.workloads.split(","):
            for key, value in workloads.BASE_SQL_CONF.items():
                spark.conf.set(key, value)
            started = time.monotonic()
            try:
                result["answers"][name] = available[name](spark)
            except Exception:
                result["errors"][name] = traceback.format_exc()
            result["seconds"][name] = round(time.monotonic() - started, 2)
        if args.probe_secret is not None:
            try:
                result["probe"] = probe_data_plane(spark, args.probe_secret)
            except Exception:
                result["errors"]["probe"] = traceback.format_exc()
        result["files"] = shuffle_files(os.environ.get("SPARK_LOCAL_DIRS", "/nonexistent"))
        if args.marker:
            # Read while the application runs: its shuffle files are deleted when it stops.
            result["marked_files"] = {
                kind: files_containing(paths, args.marker) for kind, paths in result["files"].items()
            }
        result["counters"] = sluice_counters(spark)
        if args.hold:
            result["executors"] = executor_hosts(spark)
            hold(args.hold)
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
