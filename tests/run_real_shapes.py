"""Runs the wide shapes of real jobs (maps x reducers in the thousands) in one Spark application
and writes their answers, errors and durations as JSON. Run in its own process (one Python
process starts Spark's driver JVM once):

    python tests/run_real_shapes.py --shuffle sort|sluice --out out.json --workloads wide_1500x400,...
        [--option request_timeout=45s] [--conf key=value] [--stages]

What matters is the shape, maps x reducers: ``wide_MxR`` groups rows read by M map tasks into R
reduce partitions, then aggregates the R groups' outputs in one task (so one reducer reads R map
outputs). Each map task writes 5 x R rows, so that (nearly) every map output has data for every
reducer: Spark leaves empty blocks out of a reducer's input, and a sparse shape would open far
fewer channels than the real one. ``smj_join`` is a sort-merge join of two ~50 MB sides over 8
shuffle partitions. ``--narrow`` runs the wide shapes' rows over 8 maps and 8 reducers: the
same answer, quickly (the tests' sort-shuffle reference). Every workload runs with a deadline: a hang is
cancelled and reported as an
error, and the next workload still runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import realapps  # noqa: E402
import sessions  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

ROWS_PER_MAP_AND_REDUCER = 5
KEYS = 100_003
# Rows of about 70 bytes in the shuffle (two longs and a 32-character string): ~50 MB a side.
JOIN_ROWS = 750_000
DEADLINE_S = 420.0
# Map and reduce partitions of the reference run (--narrow): the answer does not depend on them.
NARROW = 8


def wide(maps: int, reducers: int) -> Callable[[SparkSession, bool], Any]:
    """A real job's wide shape: M maps, a hash repartition into R reducers that group by key, then a
    global aggregate over the R groups' outputs. ``narrow`` computes the same answer (the same
    rows and groups) over NARROW maps and reducers: how the reference answer is made quickly."""

    def job(spark: SparkSession, narrow: bool) -> Any:
        m, r = (NARROW, NARROW) if narrow else (maps, reducers)
        spark.conf.set("spark.sql.shuffle.partitions", str(r))
        df = spark.range(0, ROWS_PER_MAP_AND_REDUCER * maps * reducers, 1, m).withColumn("k", F.col("id") % KEYS)
        groups = df.repartition(r, "k").groupBy("k").agg(F.count("*").alias("n"), F.sum("id").alias("s"))
        out = groups.agg(F.count("*"), F.sum("n"), F.sum("s"), F.bit_xor(F.xxhash64("k", "n", "s")))
        return [list(r) for r in out.collect()]

    return job


def _side(spark: SparkSession, seed: int, prefix: str) -> Any:
    return spark.range(0, JOIN_ROWS, 1, 8).select(
        F.pmod(F.xxhash64("id", F.lit(seed)), F.lit(JOIN_ROWS)).alias("k"),
        F.xxhash64("id", F.lit(seed + 1)).alias(f"{prefix}v"),
        F.concat(F.hex(F.xxhash64("id", F.lit(seed + 2))), F.hex(F.xxhash64("id", F.lit(seed + 3)))).alias(
            f"{prefix}s"
        ),
    )


def smj_join(spark: SparkSession, narrow: bool) -> Any:
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    spark.conf.set("spark.sql.join.preferSortMergeJoin", "true")
    spark.conf.set("spark.sql.shuffle.partitions", "8")
    joined = _side(spark, 7, "l").join(_side(spark, 17, "r"), "k")
    plan = joined._jdf.queryExecution().executedPlan().toString()
    assert "SortMergeJoin" in plan, plan
    out = joined.agg(
        F.count("*"), F.sum(F.pmod("lv", F.lit(1_000_003))), F.bit_xor(F.xxhash64("k", "lv", "ls", "rv", "rs"))
    )
    return [list(r) for r in out.collect()]


WORKLOADS: Dict[str, Callable[[SparkSession, bool], Any]] = {
    "wide_1500x400": wide(1500, 400),
    "wide_4000x200": wide(4000, 200),
    "wide_200x4000": wide(200, 4000),
    "smj_join": smj_join,
}


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shuffle", choices=["sort", "sluice"], required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--option", action="append", default=[], help="a Sluice option, name=value")
    parser.add_argument("--conf", action="append", default=[], help="a Spark setting, key=value")
    parser.add_argument("--deadline", type=float, default=DEADLINE_S, help="seconds per workload")
    parser.add_argument(
        "--stages",
        action="store_true",
        help="also write every stage attempt with its task failures (small applications only)",
    )
    parser.add_argument(
        "--narrow",
        action="store_true",
        help=f"run the wide shapes over {NARROW} maps and {NARROW} reducers (same answer)",
    )
    args = parser.parse_args(argv)

    options, conf = dict(o.split("=", 1) for o in args.option), dict(c.split("=", 1) for c in args.conf)
    result: Dict[str, Any] = {"runs": {}}
    with realapps.build_session(args.shuffle, "shapes", options, conf) as spark:
        result["shuffle_manager"] = spark.sparkContext.getConf().get("spark.shuffle.manager", "sort")
        for name in args.workloads.split(","):
            job = WORKLOADS[name]
            result["runs"][name] = realapps.run_with_deadline(
                spark,
                name,
                args.deadline,
                lambda: job(spark, args.narrow),  # noqa: B023 (called at once, in the loop)
            )
            print(
                f"{name}: {result['runs'][name]['seconds']}s {result['runs'][name].get('key_errors', '')}",
                file=sys.stderr,
                flush=True,
            )
        if args.stages:
            result["stages"] = realapps.stage_attempts(spark)
    sessions.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
