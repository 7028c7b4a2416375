"""A Sluice application that writes an event log and is then killed: runs a shuffle, waits until
the executors reported it (``sluice.metrics``), writes its application id and what the live
Sluice tab shows to ``--out``, and sleeps until the test that started it kills it with SIGKILL,
so its event log never gets an application-end event. Run in its own process (see
test_connect_history.py): ``python tests/run_history_app.py --event-log DIR --out result.json``.
"""

from __future__ import annotations

import argparse
import time

import sluice
from pyspark.sql import functions as F
from sessions import build_session, http_json, ui_url, write_json


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--event-log", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    spark = build_session(
        "sluice-killed-app",
        "sluice",
        "local[2]",
        conf={
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": f"file://{args.event_log}",
            "spark.eventLog.compress": "false",
            "spark.sql.shuffle.partitions": "3",
        },
        options={"metrics_report_interval": "200ms"},
        log_level="WARN",
    )
    df = spark.range(0, 50_000, 1, 4).withColumn("k", F.col("id") % 11).groupBy("k").count()
    assert sorted(r["count"] for r in df.collect()) == sorted(
        [50_000 // 11 + (1 if k < 50_000 % 11 else 0) for k in range(11)]
    )
    sluice.metrics(spark)  # the executors reported everything: the finished stages' last figures are posted
    time.sleep(2.0)  # the listener bus hands them to the event log, which flushes each of Sluice's events
    write_json(
        args.out, {"app_id": spark.sparkContext.applicationId, "live": http_json(f"{ui_url(spark)}/sluice/json")}
    )
    time.sleep(600)  # killed long before


if __name__ == "__main__":
    main()
