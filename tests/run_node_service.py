"""A Sluice application whose map outputs are served by the node shuffle service
(``spark.sluice.service.enabled``) on ``local-cluster[2,1,1024]``: a shuffle whose reducers read
slowly, and one executor SIGKILLed while they read. Reports the answer against its expected value,
Spark's stage attempts (so the test can tell whether any map task ran again), and which executor
was killed.

    python tests/run_node_service.py --service-port PORT --out result.json
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from typing import Any, Dict, List, Tuple

import nodeservice
import realapps
import sessions
from pyspark.sql import functions as F

MAPS = 8
REDUCERS = 4
KEYS = 20


def expected(rows: int) -> List[Tuple[int, int, int]]:
    """(key, sum of ids, sum of pad lengths) of the job below, computed here."""
    sums: Dict[int, List[int]] = {}
    for i in range(rows):
        k = i % KEYS
        s = sums.setdefault(k, [0, 0])
        s[0] += i
        s[1] += 40 + i % 7
    return sorted((k, v[0], v[1]) for k, v in sums.items())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--service-port", type=int, required=True)
    parser.add_argument("--rows", type=int, default=40000)
    args = parser.parse_args()
    spark = nodeservice.session(
        "sluice-node-service",
        args.service_port,
        {
            "spark.sql.adaptive.enabled": "false",
            "spark.task.maxFailures": "8",
            "spark.stage.maxConsecutiveAttempts": "8",
        },
    )
    rows = spark.range(0, args.rows, numPartitions=MAPS).select(
        (F.col("id") % KEYS).alias("k"), "id", F.expr("repeat('x', 40 + cast(id % 7 as int))").alias("pad")
    )
    # A 3 ms pause every 50 rows as the reducers pull their input: every reducer reads for seconds.
    pause = F.when(F.col("id") % 50 == 0, F.expr("reflect('java.lang.Thread', 'sleep', cast(id * 0 + 3 as bigint))"))
    slow = rows.repartition(REDUCERS, "k").select(
        "k", (F.col("id") + F.coalesce(F.length(pause), F.lit(0)) * 0).alias("id"), "pad"
    )
    summed = slow.groupBy("k").agg(F.sum("id").alias("s"), F.sum(F.length("pad")).alias("p"))
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    state: Dict[str, Any] = {}

    def killer() -> None:
        def reduce_running() -> bool:
            info = tracker.getStageInfo(1)  # stage 1 reads what stage 0 wrote
            return info is not None and info.numActiveTasks > 0

        if realapps.wait_for(reduce_running, timeout=300):
            time.sleep(1.0)  # the reducers have opened their channels
            pids = sessions.own_executor_pids(spark)
            if pids:
                with open(f"/proc/{pids[0]}/cmdline", "rb") as f:
                    argv = f.read().decode("utf-8", "replace").split("\0")
                state["killed_executor"] = argv[argv.index("--executor-id") + 1] if "--executor-id" in argv else "?"
                info = tracker.getStageInfo(1)
                state["reduces_done_at_kill"] = info.numCompletedTasks if info is not None else None
                os.kill(pids[0], signal.SIGKILL)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    got = sorted((int(r["k"]), int(r["s"]), int(r["p"])) for r in summed.collect())
    thread.join(timeout=30)
    result = {
        "app_id": sc.applicationId,
        "answer_ok": got == expected(args.rows),
        "answer": got[:3],
        "killed_executor": state.get("killed_executor"),
        "reduces_done_at_kill": state.get("reduces_done_at_kill"),
        "stages": realapps.stage_attempts(spark),
    }
    spark.stop()
    sessions.write_json(args.out, result)


if __name__ == "__main__":
    main()
