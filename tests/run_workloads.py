"""Runs the workloads of ``workloads.py`` in one Spark application and writes their answers as JSON.

Run in its own process, because a Python process can start Spark's driver JVM only once:

    python tests/run_workloads.py --shuffle sluice --out answers.json [--option buffer_timeout=0]
    spark-submit --properties-file f.conf tests/run_workloads.py --shuffle preconfigured --out ...

``--shuffle sort`` uses Spark's sort shuffle (the reference), ``sluice`` configures Sluice with
``sluice.configure``, ``preconfigured`` takes every setting from spark-submit. Besides the answers,
the output records which shuffle files appeared in the local dirs (``SPARK_LOCAL_DIRS``) and
Sluice's own network counters, so a test can tell which shuffle carried the data.
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

from pyspark.sql import SparkSession  # noqa: E402

import workloads  # noqa: E402

DEFAULT_MASTER = "local-cluster[2,1,1024]"


def build_session(shuffle: str, options: Dict[str, str], conf: Dict[str, str]) -> SparkSession:
    builder = SparkSession.builder.appName(f"sluice-workloads-{shuffle}")
    if shuffle != "preconfigured":
        builder = builder.master(os.environ.get("SLUICE_TEST_MASTER", DEFAULT_MASTER))
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    for key, value in conf.items():
        builder = builder.config(key, value)
    if shuffle == "sluice":
        import sluice

        builder = sluice.configure(builder, **options)
    elif shuffle == "sort":
        builder = builder.config("spark.shuffle.manager", "sort")
    return builder.getOrCreate()


def shuffle_files(root: str) -> Dict[str, List[str]]:
    found: Dict[str, List[str]] = {"sort": [], "sluice": []}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name.startswith("shuffle_") and name.endswith(".data"):
                found["sort"].append(os.path.join(dirpath, name))
            elif name.startswith("sluice-shuffle-") and name.endswith(".part"):
                found["sluice"].append(os.path.join(dirpath, name))
    return found


def sluice_counters(spark: SparkSession) -> Dict[str, Any]:
    try:
        import sluice

        metrics = getattr(sluice, "metrics", None)
        if metrics is None:
            return {}
        table = metrics(spark)
        totals: Dict[str, Any] = {}
        for name in ("numRecordsOut", "numRecordsIn", "numBytesOut", "numBytesInLocal", "numBytesInRemote"):
            if name in table.column_names:
                totals[name] = int(sum(v or 0 for v in table.column(name).to_pylist()))
        return totals
    except Exception as e:  # reported, and asserted on by the tests that need counters
        return {"error": repr(e)}


def executor_hosts(spark: SparkSession) -> Dict[str, str]:
    """executor id -> host of the application's live executors (Spark's REST API)."""
    import realapps

    return {e["id"]: e["hostPort"].rsplit(":", 1)[0] for e in realapps.rest(spark, "executors") if e["id"] != "driver"}


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
    parser.add_argument("--hold", help="before stopping Spark, create HOLD.ready and wait (up to 180 s) "
                        "for HOLD.done, so a test can look at the executors' connections")
    args = parser.parse_args(argv)

    options = dict(o.split("=", 1) for o in args.option)
    conf = dict(c.split("=", 1) for c in args.conf)
    spark = build_session(args.shuffle, options, conf)
    result: Dict[str, Any] = {"answers": {}, "errors": {}, "seconds": {}}
    try:
        result["shuffle_manager"] = spark.sparkContext.getConf().get("spark.shuffle.manager", "sort")
        for name in args.workloads.split(","):
            for key, value in workloads.BASE_SQL_CONF.items():
                spark.conf.set(key, value)
            started = time.monotonic()
            try:
                result["answers"][name] = {**workloads.WORKLOADS, **workloads.EXTRA_WORKLOADS}[name](spark)
            except Exception:
                result["errors"][name] = traceback.format_exc()
            result["seconds"][name] = round(time.monotonic() - started, 2)
        result["files"] = shuffle_files(os.environ.get("SPARK_LOCAL_DIRS", "/nonexistent"))
        result["counters"] = sluice_counters(spark)
        if args.hold:
            result["executors"] = executor_hosts(spark)
            hold(args.hold)
    finally:
        spark.stop()
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
