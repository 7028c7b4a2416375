"""Latency markers: no histogram anywhere until latency tracking is switched on (here for one
job, through local properties), then histograms per source at the chosen granularity, in
sluice.metrics and in Spark's metrics system."""

from __future__ import annotations

import csv
import glob
import os
import time
from typing import Any, List

import sluice
from sessions import SESSION_MASTER, http_get, ui_url
from sparkjobs import run_in_group, shuffle_rows

INTERVAL = "spark.sluice.latencyTracking.interval"
GRANULARITY = "spark.sluice.latencyTracking.granularity"
PROMETHEUS_LATENCY = f"_{sluice.monitoring.METRICS_SOURCE}_latency_Count"


def test_latency_histograms_exist_only_when_tracking_is_on(spark: Any) -> None:
    sc = spark.sparkContext
    prometheus = f"{ui_url(spark)}/metrics/prometheus"
    run_in_group(spark, "sluice-latency-off", lambda: shuffle_rows(spark, 20_000))
    off = sluice.metrics(spark)
    assert not [name for name in off.schema.names if name.startswith("latency")]
    assert PROMETHEUS_LATENCY not in http_get(prometheus)

    sc.setLocalProperty(INTERVAL, "1ms")
    sc.setLocalProperty(GRANULARITY, "subtask")
    try:
        stages = run_in_group(spark, "sluice-latency-on", lambda: shuffle_rows(spark, 20_000, 4, 2))
    finally:
        sc.setLocalProperty(INTERVAL, None)
        sc.setLocalProperty(GRANULARITY, None)

    table = sluice.metrics(spark)
    latency_columns = ("latency_count", "latency_p50_ms", "latency_p99_ms", "latency_histograms")
    for column in latency_columns:
        assert column in table.schema.names
    rows = [r for r in table.to_pylist() if r["stage_id"] in stages]
    writers = [r for r in rows if r["numRecordsOut"] > 0]
    readers = [r for r in rows if r["numRecordsIn"] > 0]
    assert len(writers) == 4 and readers
    for w in writers:  # producers emit markers but have no histograms of their own
        assert w["latency_count"] is None and w["latency_histograms"] == []
    writer_stage = writers[0]["stage_id"]
    sources = set()
    for r in readers:
        assert r["latency_count"] >= 1
        assert 0 <= r["latency_p50_ms"] <= r["latency_p99_ms"] <= r["latency_max_ms"]
        for h in r["latency_histograms"]:  # subtask granularity: one per producer task
            assert h["source_stage_id"] == writer_stage and h["count"] >= 1
            sources.add(h["source_partition_id"])
        assert sum(h["count"] for h in r["latency_histograms"]) == r["latency_count"]
    assert sources == {0, 1, 2, 3}  # every producer's markers reached the consumers
    # Earlier tasks (tracking off) still have none.
    assert all(r["latency_count"] is None for r in table.to_pylist() if r["stage_id"] not in stages)
    if SESSION_MASTER.startswith("local-cluster"):
        # On a cluster the histograms are in the executors' metrics systems, which the session
        # has write CSV files every second: the reading executors' histogram counts markers.
        directory = sc.getConf().get("spark.metrics.conf.executor.sink.csv.directory")
        counts = wait_for_latency_counts(directory, sc.applicationId)
        assert counts and max(counts) >= 1, f"no latency histogram with markers in {directory}: {counts}"
    else:
        # The driver JVM runs the executor: its servlet shows the executor's latency histogram.
        assert PROMETHEUS_LATENCY in http_get(prometheus)


def wait_for_latency_counts(directory: str, app_id: str, timeout_s: float = 30.0) -> List[int]:
    """The last ``count`` of each executor's ``...sluice.latency.csv`` of application ``app_id``
    (CsvSink: one file per metric, a line per report), once one counts a marker."""
    deadline = time.monotonic() + timeout_s
    counts: List[int] = []
    while time.monotonic() < deadline:
        counts = []
        for path in glob.glob(os.path.join(directory, f"{app_id}.*.{sluice.monitoring.METRICS_SOURCE}.latency.csv")):
            with open(path) as f:
                rows = list(csv.DictReader(f))
            if rows:
                counts.append(int(rows[-1]["count"]))
        if counts and max(counts) >= 1:
            return counts
        time.sleep(0.5)
    return counts
