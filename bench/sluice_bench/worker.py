"""One contender's Spark application of a benchmark, run in its own Python process:

    python -m sluice_bench.worker KIND CONTENDER SPEC.json OUT.json

KIND is ``batch``, ``short``, ``cold``, ``latency``, ``memory``, ``scale``, ``cluster`` or ``allocation``;
CONTENDER is ``sluice``, ``sluice-service`` (Sluice, map outputs served by its node shuffle service),
``sort`` (Spark's sort shuffle) or ``builtin`` (the sort shuffle for batch, Spark's streaming shuffle
for Real-Time Mode). SPEC says what to run; OUT receives the timings, answers and probes as JSON.
Every application but a ``cold`` or ``allocation`` one (which time a fresh application's first
jobs, and what dynamic allocation costs) first runs one unmeasured warm-up job, the same for
every contender.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, Dict, List

from pyspark.sql import SparkSession

from sluice_bench import jobs, jobs_allocation, jobs_short, jobs_streaming
from sluice_bench.session import build_session

# What each KIND runs in the contender's session: (session, contender, spec) -> the result.
RUNS: Dict[str, Callable[[SparkSession, str, Dict[str, Any]], Dict[str, Any]]] = {
    "batch": jobs.run_batch,
    "short": jobs_short.run_short,
    "cold": jobs_short.run_cold,
    "latency": jobs_streaming.run_latency,
    "memory": jobs.run_memory,
    "scale": jobs.run_scale,
    "cluster": jobs.run_cluster,
    "allocation": jobs_allocation.run_allocation,
}


def main(argv: List[str]) -> int:
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    kind, contender, spec_path, out_path = argv
    with open(spec_path) as f:
        spec: Dict[str, Any] = json.load(f)
    spec["kind"] = kind
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.pop("SPARK_HOME", None)
    run = RUNS.get(kind)
    if run is None:
        print(f"unknown benchmark kind {kind!r}; one of {', '.join(RUNS)}", file=sys.stderr)
        return 2
    spark = build_session(contender, spec)
    try:
        result = run(spark, contender, spec)
    finally:
        spark.stop()
    with open(out_path, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
