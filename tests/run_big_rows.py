"""Runs the big-row shape (many map outputs of large rows into two reducers) in one Spark
application, alternating the contenders if asked, and writes answers, errors and durations as JSON:

    python tests/run_big_rows.py --shuffle sort|sluice[,sort|sluice...] --out out.json
        [--maps 3000] [--row-kb 600] [--rounds 1]

The JSON holds every run (its answer checked against :func:`expected`, its error if it failed:
a failed application is a result, and the next one still runs) and each shuffle's median time,
with Sluice's over the sort shuffle's.

Each map task writes two rows of ``--row-kb`` KB (one for each reducer), so each reducer reads
one map output per map task, every one holding a record larger than a network buffer. A reader
that keeps decode state per map output until its task ends needs ``maps x row`` bytes of heap
per reducer (the issue's 3,000 maps x ~600 KB rows killed every 1 GiB executor); one that drops
an input's state at its end needs a row or two. Both shuffle managers run in their own
application (Spark picks the shuffle manager per application), on ``SLUICE_REAL_MASTER``
(default ``local-cluster[2,1,1024]``), AQE off.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import zlib
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import realapps  # noqa: E402
import sessions  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

MASTER = "local-cluster[2,1,1024]"
DEADLINE_S = 600.0
SHA_CHARS = 64


def big_rows(spark: SparkSession, maps: int, row_kb: int) -> Any:
    """Two rows of ``row_kb`` KB per map task, hash-repartitioned into two reducers (every byte
    crosses the shuffle; nothing is aggregated map-side), then reduced to checksums: per reducer
    [k, rows, sum of ids, bytes, sum of the rows' CRC32s]."""
    df = spark.range(0, 2 * maps, 1, maps).select(
        (F.col("id") % 2).alias("k"),
        F.col("id"),
        F.expr(f"repeat(sha2(cast(id as string), 256), {repeats_of(row_kb)})").alias("blob"),
    )
    read = df.repartition(2, "k").select(
        "k", "id", F.length("blob").alias("n"), F.crc32(F.col("blob").cast("binary")).alias("c")
    )
    out = read.groupBy("k").agg(F.count("*"), F.sum("id"), F.sum("n"), F.sum("c"))
    return sorted([list(r) for r in out.collect()])


def repeats_of(row_kb: int) -> int:
    """How many SHA-256 hex digests make a row of about ``row_kb`` KB."""
    return max(1, row_kb * 1024 // SHA_CHARS)


def expected(maps: int, row_kb: int) -> List[List[int]]:
    """:func:`big_rows`'s answer, from the rows' definition (what the sort shuffle answers)."""
    out = []
    for k in (0, 1):
        ids = range(k, 2 * maps, 2)
        blobs = (hashlib.sha256(str(i).encode()).hexdigest().encode() * repeats_of(row_kb) for i in ids)
        crcs = sum(zlib.crc32(b) for b in blobs)
        out.append([k, len(ids), sum(ids), len(ids) * SHA_CHARS * repeats_of(row_kb), crcs])
    return out


def run_one(shuffle: str, maps: int, row_kb: int) -> Dict[str, Any]:
    """One application of ``shuffle`` running the job once."""
    options = {"request_timeout": "120s"} if shuffle == "sluice" else {}
    master = os.environ.get("SLUICE_REAL_MASTER", MASTER)
    conf = {"spark.task.maxFailures": "2", "spark.executor.memory": master.rstrip("]").split(",")[-1] + "m"}
    with realapps.build_session(shuffle, "big-rows", options, conf) as spark:
        run = realapps.run_with_deadline(spark, "big_rows", DEADLINE_S, lambda: big_rows(spark, maps, row_kb))
        if "error" in run:
            run["stages"] = realapps.stage_attempts(spark)
        try:  # informative only: the run's answer and time stand without it
            run["stage_metrics"] = stage_metrics(spark)
            run["executors"] = [
                {"id": e["id"], "gc_ms": e.get("totalGCTime"), "peak": e.get("peakMemoryMetrics")}
                for e in sessions.rest(spark, "executors")
            ]
        except Exception as e:
            run["stage_metrics_error"] = repr(e)
    return run


# Where a run's time went, per stage attempt (Spark's REST names, summed over its tasks).
STAGE_FIELDS = ("executorRunTime", "executorCpuTime", "jvmGcTime", "shuffleFetchWaitTime", "shuffleReadBytes")
STAGE_FIELDS += ("shuffleWriteBytes", "shuffleWriteTime", "memoryBytesSpilled", "diskBytesSpilled")


def stage_metrics(spark: SparkSession) -> List[Dict[str, Any]]:
    """Each stage attempt's tasks, window (submitted, completed) and summed task metrics."""
    out = []
    for s in sessions.rest(spark, "stages"):
        row = {"stage": s["stageId"], "attempt": s["attemptId"], "status": s["status"], "tasks": s["numTasks"]}
        row.update({"submitted": s.get("submissionTime"), "completed": s.get("completionTime")})
        out.append(dict(row, **{f: s.get(f) for f in STAGE_FIELDS}))
    return sorted(out, key=lambda r: (r["stage"], r["attempt"]))


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shuffle", required=True, help="sort, sluice, or a comma-separated order to alternate")
    parser.add_argument("--out", required=True)
    parser.add_argument("--maps", type=int, default=3000)
    parser.add_argument("--row-kb", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--single", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("SLUICE_REAL_MASTER", MASTER)
    if args.single:
        sessions.write_json(args.out, run_one(args.shuffle, args.maps, args.row_kb))
        return 0
    # One application per run, each in its own Python process (one driver JVM per process).
    want = expected(args.maps, args.row_kb)
    runs: List[Dict[str, Any]] = []
    for r in range(args.rounds):
        for i, shuffle in enumerate(args.shuffle.split(",")):
            out = f"{args.out}.{r}.{i}.{shuffle}"
            cmd = [sys.executable, __file__, "--single", "--shuffle", shuffle, "--out", out]
            cmd += ["--maps", str(args.maps), "--row-kb", str(args.row_kb)]
            done = subprocess.run(cmd)
            if os.path.isfile(out):
                with open(out) as f:
                    run = json.load(f)
                os.remove(out)
            else:
                run = {"error": f"the application's process ended with exit code {done.returncode}", "seconds": None}
            run.update({"round": r, "shuffle": shuffle, "correct": run.get("answer") == want})
            print(
                f"round {r} {shuffle}: {run['seconds']}s correct={run['correct']} {run.get('key_errors', '')}",
                file=sys.stderr,
                flush=True,
            )
            runs.append(run)
    result = {"maps": args.maps, "row_kb": args.row_kb, "master": os.environ["SLUICE_REAL_MASTER"]}
    sessions.write_json(args.out, dict(result, summary=summarize(runs), runs=runs))
    return 0


def summarize(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Per shuffle: the median seconds of its correct runs and how many runs completed correctly;
    and Sluice's median over the sort shuffle's (None unless both have one)."""
    out: Dict[str, Any] = {}
    for shuffle in sorted({r["shuffle"] for r in runs}):
        mine = [r for r in runs if r["shuffle"] == shuffle]
        good = sorted(r["seconds"] for r in mine if r["correct"])
        median = (good[(len(good) - 1) // 2] + good[len(good) // 2]) / 2 if good else None
        out[shuffle] = {"median_s": median, "completed": len(good), "runs": len(mine)}
    sluice, sort = (out.get(k, {}).get("median_s") for k in ("sluice", "sort"))
    out["sluice_over_sort"] = sluice / sort if sluice and sort else None
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
