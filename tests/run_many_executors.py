"""Runs the workloads of ``workloads.py`` and the wide shapes of ``run_real_shapes.py`` through Sluice
in one Spark application of many small executors, and writes their answers as JSON. Run in its own
process (one Python process starts Spark's driver JVM once):

    python tests/run_many_executors.py --out out.json --workloads df_group_by,... --shapes wide_1500x400,...
        [--option name=value] [--conf key=value]

The master is ``SLUICE_REAL_MASTER`` (default ``local-cluster[12,1,512]``: twelve executors of
one core and 512 MiB), so every reducer's gate reads from up to twelve executors. Besides the
answers the report holds the live executors' count and each reading task's fan-in (Sluice's
metrics), so a test can tell the gates read from many executors.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import realapps  # noqa: E402
import run_real_shapes  # noqa: E402
import run_workloads  # noqa: E402
import sessions  # noqa: E402
import workloads  # noqa: E402

MASTER = "local-cluster[12,1,512]"
# A guard against a hung job, not a time limit: a loaded CI machine has taken 300 s for one shape.
DEADLINE_S = 600.0


def executors(spark: Any, expected: int, timeout: float = 180.0) -> int:
    """The live executors, once ``expected`` registered (or the timeout passed)."""
    found = realapps.wait_for(
        lambda: len([e for e in sessions.rest(spark, "executors") if e["id"] != "driver"]) >= expected or None,
        timeout,
    )
    return len([e for e in sessions.rest(spark, "executors") if e["id"] != "driver"]) if found else 0


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--workloads", default=",".join(workloads.WORKLOADS))
    parser.add_argument("--shapes", default="")
    parser.add_argument("--option", action="append", default=[], help="a Sluice option, name=value")
    parser.add_argument("--conf", action="append", default=[], help="a Spark setting, key=value")
    parser.add_argument("--executors", type=int, default=12, help="how many executors the master starts")
    args = parser.parse_args(argv)

    options = dict(o.split("=", 1) for o in args.option)
    master = os.environ.get("SLUICE_REAL_MASTER", MASTER)
    result: Dict[str, Any] = {"answers": {}, "errors": {}, "seconds": {}, "shapes": {}}
    # Each executor gets what a local-cluster worker has (the master's last number, in MiB).
    conf = {"spark.executor.memory": master.rstrip("]").split(",")[-1] + "m", "spark.task.maxFailures": "2"}
    conf.update(c.split("=", 1) for c in args.conf)
    with sessions.build_session("sluice-many-executors", "sluice", master, options=options, conf=conf) as spark:
        spark.sparkContext.setLogLevel("WARN")
        result["shuffle_manager"] = spark.sparkContext.getConf().get("spark.shuffle.manager", "sort")
        result["executors"] = executors(spark, args.executors)
        for name in [n for n in args.workloads.split(",") if n]:
            for key, value in workloads.BASE_SQL_CONF.items():
                spark.conf.set(key, value)
            run = realapps.run_with_deadline(spark, name, DEADLINE_S, lambda: workloads.WORKLOADS[name](spark))  # noqa: B023
            result["seconds"][name] = run["seconds"]
            if "error" in run:
                result["errors"][name] = run["error"]
            else:
                result["answers"][name] = run["answer"]
            print(f"{name}: {run['seconds']}s", file=sys.stderr, flush=True)
        spark.conf.set("spark.sql.adaptive.enabled", "false")
        for name in [n for n in args.shapes.split(",") if n]:
            started = time.monotonic()
            job = run_real_shapes.WORKLOADS[name]
            result["shapes"][name] = realapps.run_with_deadline(
                spark,
                name,
                DEADLINE_S,
                lambda: job(spark, False),  # noqa: B023 (called at once, in the loop)
            )
            print(f"{name}: {round(time.monotonic() - started, 1)}s", file=sys.stderr, flush=True)
        result["counters"] = run_workloads.sluice_counters(spark)
    sessions.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
