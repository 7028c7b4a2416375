"""Kills one executor JVM while the reduce stage of a Sluice shuffle reads its output, and prints
the job's answer next to the expected one as JSON. Run in its own process (see
test_executor_loss.py): ``python tests/run_executor_loss.py --out result.json``.

The reduce tasks of the first shuffle pause (in the JVM, while they pull records from Sluice's
reader) every few hundred records, so the kill lands while they hold open channels to the dying
executor. Spark must
recompute the lost map outputs (Sluice turns the broken channels into FetchFailedExceptions
naming that executor) and still give the exact answer.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from typing import Any, Dict, List

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from sessions import APP_MASTER, build_session, executor_pids, write_json

N = 400_000
KEYS = 1_000


def killer(spark: SparkSession, state: Dict[str, Any]) -> None:
    """Waits until the reduce stage runs, then kills one executor JVM with SIGKILL."""
    tracker = spark.sparkContext.statusTracker()
    app_id = spark.sparkContext.applicationId
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            # Stage 1 reads the first shuffle (stage 0 wrote it).
            if stage_id == 1 and info is not None and info.numActiveTasks > 0:
                time.sleep(1.0)  # let the reduce tasks open their channels and start reading
                pids = executor_pids(app_id)
                if pids:
                    os.kill(pids[0], signal.SIGKILL)
                    state["killed"] = pids[0]
                    state["stage"] = stage_id
                    return
        time.sleep(0.1)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    state: Dict[str, Any] = {}
    conf = {"spark.task.maxFailures": "8", "spark.stage.maxConsecutiveAttempts": "8"}
    with build_session("sluice-executor-loss", "sluice", APP_MASTER, conf=conf) as spark:
        spark.conf.set("spark.sql.adaptive.enabled", "false")
        spark.conf.set("spark.sql.shuffle.partitions", "4")
        rows = spark.range(0, N, 1, 8).select(((F.col("id") * 7919) % KEYS).alias("k"), F.col("id"))
        # A 30 ms pause every 500 rows, evaluated in the JVM as the reduce task pulls its input.
        pause = F.when(
            F.col("id") % 500 == 0, F.expr("reflect('java.lang.Thread', 'sleep', cast(id * 0 + 30 as bigint))")
        )
        slow = rows.repartition(4, "k").select(
            "k", (F.col("id") + F.coalesce(F.length(pause), F.lit(0)) * 0).alias("id")
        )
        summed = slow.groupBy("k").agg(F.sum("id").alias("s"))
        thread = threading.Thread(target=killer, args=(spark, state), daemon=True)
        thread.start()
        got = sorted((r["k"], r["s"]) for r in summed.collect())
        thread.join(timeout=5)
        expected: Dict[int, int] = {}
        for i in range(N):
            k = (i * 7919) % KEYS
            expected[k] = expected.get(k, 0) + i
        result = {
            "got": [list(kv) for kv in got],
            "expected": sorted([k, v] for k, v in expected.items()),
            "killed": state.get("killed"),
            "stage": state.get("stage"),
        }
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
