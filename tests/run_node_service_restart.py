"""A Sluice application on ``local-cluster[2,1,1024]`` whose node shuffle service restarts without
a recovery dir (``spark.sluice.service.recoveryDir`` unset: it forgets every registration) between
the job that wrote a shuffle's map outputs and a second job that reads them again. The runner owns
the service: it starts it, stops it as a restart does (SIGTERM; the files stay), starts it again on
the same port and waits until the driver has registered the application's executors there again.
Reports both answers, Spark's stage attempts and whether the re-registration came.

    python tests/run_node_service_restart.py --work DIR --out result.json
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict, List, Tuple

import nodeservice
import realapps
import sessions

MAPS = 6
REDUCERS = 3
KEYS = 30
ROWS = 30000
# A service timeout of 3 s makes the driver say "alive" every second, so the restart is noticed at once.
SETTINGS = {"spark.sluice.service.applicationTimeout": "3s"}


def expected() -> List[Tuple[int, int]]:
    sums: Dict[int, int] = {}
    for i in range(ROWS):
        sums[i % KEYS] = sums.get(i % KEYS, 0) + i
    return sorted(sums.items())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    work = Path(args.work)
    first = nodeservice.NodeService(work, SETTINGS, name="node-service-first")
    second = None
    try:
        spark = nodeservice.session(
            "sluice-node-service-restart", first.port, {"spark.stage.maxConsecutiveAttempts": "2"}
        )
        sc = spark.sparkContext
        app = sc.applicationId
        sums = sc.parallelize(range(ROWS), MAPS).map(lambda i: (i % KEYS, i)).reduceByKey(lambda a, b: a + b, REDUCERS)
        first_answer = sorted(sums.collect())
        first.stop()
        second = nodeservice.NodeService(work, SETTINGS, port=first.port, name="node-service-second")
        restarted = second

        def registered_again() -> bool:
            log = restarted.log_text()
            return all(f"Executor {e} of application {app} registered" in log for e in ("0", "1"))

        again = nodeservice.wait_until(registered_again, 60)
        # The same RDD: its shuffle's map stage is skipped, its outputs read from the restarted service.
        second_answer = sorted(sums.collect())
        result = {
            "app_id": app,
            "first_ok": first_answer == expected(),
            "second_ok": second_answer == expected(),
            "second_answer": second_answer[:3],
            "registered_again": again,
            "stages": realapps.stage_attempts(spark),
        }
        spark.stop()
        result["second_log"] = second.log_text()[-6000:]
        sessions.write_json(args.out, result)
    finally:
        first.stop()
        if second is not None:
            second.stop()


if __name__ == "__main__":
    main()
