"""A shuffle-heavy PySpark job on a local two-executor cluster, run through Sluice.

Two inputs of two million rows with pseudo-random keys are aggregated (groupBy over 200 shuffle
partitions) and joined (a sort-merge join: broadcast joins are off, so both sides are
shuffled), so most of the work crosses Sluice's network stack between the two executors.

While it runs it prints the address of Spark's UI (and its Sluice tab) and each step's progress;
``keep_ui_seconds`` keeps the session open afterwards so the tab can be looked at. Run as a script
under spark-submit (``demo.py --rows N --partitions N``), the same job runs on the session
spark-submit configures: that is how ``sluice demo --compare`` hands it to ``sluice compare``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, ContextManager, Dict, Iterator, List, Optional, Tuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice.config import configure
from sluice.monitoring import metrics

MASTER = "local-cluster[2,1,1024]"
ROWS = 2_000_000
PARTITIONS = 200
# Rounds of `sluice demo --compare`.
COMPARE_ROUNDS = 3
# How long --keep-ui keeps the session open when given no number (Ctrl-C stops it earlier).
KEEP_UI_SECONDS = 600.0


@dataclass(frozen=True)
class DemoResult:
    """What the demo job computed: plain values, compared across runs and shuffle managers."""

    rows: int
    groups: int
    aggregated_total: int
    aggregate_checksum: int
    top_groups: List[Tuple[int, int, int]]
    join_rows: int
    join_checksum: int
    seconds: float


def keyed_rows(spark: SparkSession, rows: int, seed: int) -> DataFrame:
    """``rows`` rows of (key, value): keys spread pseudo-randomly over about half as many values
    as rows, so a group holds two rows on average and partial aggregation saves little."""
    key_space = max(1, rows // 2)
    return spark.range(rows).select(
        F.pmod(F.xxhash64("id", F.lit(seed)), F.lit(key_space)).alias("key"),
        F.pmod(F.xxhash64("id", F.lit(seed + 1)), F.lit(1000)).alias("value"),
    )


Step = Callable[[str], ContextManager[None]]


@contextlib.contextmanager
def _quiet_step(label: str) -> Iterator[None]:
    yield


def run_job(
    spark: SparkSession, rows: int = ROWS, partitions: int = PARTITIONS, step: Step = _quiet_step
) -> DemoResult:
    """Runs the aggregation and the join on ``spark`` and returns their results; each of its three
    steps runs inside ``step(label)`` (see :class:`Progress`)."""
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    started = time.monotonic()
    left = keyed_rows(spark, rows, seed=1)
    right = keyed_rows(spark, rows, seed=7)

    groups = left.groupBy("key").agg(F.count(F.lit(1)).alias("n"), F.sum("value").alias("total")).cache()
    with step("groupBy(key).agg(count, sum)"):
        summary = groups.agg(
            F.count(F.lit(1)).alias("groups"),
            F.sum("total").alias("total"),
            F.bit_xor(F.xxhash64("key", "n", "total")).alias("checksum"),
        ).first()
    with step("largest groups (orderBy)"):
        top = groups.orderBy(F.desc("n"), F.desc("total"), "key").limit(10).collect()

    with step("join on key (sort-merge)"):
        joined = (
            left.join(right, "key")
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.bit_xor(F.xxhash64("key", left["value"], right["value"])).alias("checksum"),
            )
            .first()
        )
    groups.unpersist()
    if summary is None or joined is None:
        raise RuntimeError("a global aggregate returned no row")
    return DemoResult(
        rows=rows,
        groups=int(summary["groups"]),
        aggregated_total=int(summary["total"] or 0),
        aggregate_checksum=int(summary["checksum"] or 0),
        top_groups=[(int(r["key"]), int(r["n"]), int(r["total"])) for r in top],
        join_rows=int(joined["rows"]),
        join_checksum=int(joined["checksum"] or 0),
        seconds=time.monotonic() - started,
    )


def print_result(result: DemoResult) -> None:
    print(f"input: 2 x {result.rows:,} rows")
    print(f"groupBy(key).agg(count, sum): {result.groups:,} groups, sum of values {result.aggregated_total:,}")
    print("largest groups (key, count, sum):")
    for key, n, total in result.top_groups:
        print(f"  {key:>10}  {n:>3}  {total:>6}")
    print(f"join on key: {result.join_rows:,} rows")
    print(f"checksums: aggregate {result.aggregate_checksum}, join {result.join_checksum}")
    print(f"time: {result.seconds:.1f}s")


NETWORK_COLUMNS: Tuple[Tuple[str, str], ...] = (
    ("numRecordsOut", "records out"),
    ("numRecordsIn", "records in"),
    ("numBytesOut", "bytes out"),
    ("numBytesIn", "bytes in"),
    ("numBytesInLocal", "bytes in local"),
    ("numBytesInRemote", "bytes in remote"),
    ("numBuffersOut", "buffers out"),
    ("numBuffersInLocal", "buffers in local"),
    ("numBuffersInRemote", "buffers in remote"),
)


def network_metrics_by_stage(spark: SparkSession) -> List[Dict[str, int]]:
    """Sluice's counters of every stage that wrote or read shuffle data, summed over its tasks
    (one dict per stage, keyed by ``stage_id``, ``tasks`` and Flink's counter names)."""
    table = metrics(spark)
    if table.num_rows == 0:
        return []
    aggregations = [(name, "sum") for name, _ in NETWORK_COLUMNS] + [("task_attempt_id", "count")]
    grouped = table.group_by("stage_id").aggregate(aggregations).sort_by("stage_id")
    rows: List[Dict[str, int]] = []
    for row in grouped.to_pylist():
        stage = {"stage_id": int(row["stage_id"]), "tasks": int(row["task_attempt_id_count"])}
        stage.update({name: int(row[f"{name}_sum"] or 0) for name, _ in NETWORK_COLUMNS})
        rows.append(stage)
    return rows


def print_network_metrics(spark: SparkSession) -> None:
    """Prints Sluice's network metrics of the job that just ran: per stage, its tasks' records,
    bytes and buffers out and in (local and remote), from :func:`sluice.metrics`."""
    rows = network_metrics_by_stage(spark)
    if not rows:
        print("network metrics: no Sluice shuffle reported any")
        return
    headers = ["stage", "tasks"] + [label for _, label in NETWORK_COLUMNS]
    cells = [
        [str(row["stage_id"]), str(row["tasks"])] + [f"{row[name]:,}" for name, _ in NETWORK_COLUMNS] for row in rows
    ]
    totals = ["total", f"{sum(r['tasks'] for r in rows)}"] + [
        f"{sum(r[name] for r in rows):,}" for name, _ in NETWORK_COLUMNS
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells + [totals])) for i, h in enumerate(headers)]
    print("network metrics (sluice.metrics, summed per stage):")
    print("  " + "  ".join(h.rjust(w) for h, w in zip(headers, widths)))
    for line in cells + [totals]:
        print("  " + "  ".join(c.rjust(w) for c, w in zip(line, widths)))


class Progress:
    """Prints each step of the job as it starts and ends, and in between, every ``interval``
    seconds, the task counts of the stages running (from Spark's status tracker)."""

    def __init__(self, spark: SparkSession, interval: float = 2.0) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._interval = interval

    @contextlib.contextmanager
    def step(self, label: str) -> Iterator[None]:
        print(f"{label} ...", flush=True)
        started = time.monotonic()
        done = threading.Event()
        reporter = threading.Thread(target=self._report, args=(done,), name="sluice-demo-progress", daemon=True)
        reporter.start()
        try:
            yield
        finally:
            done.set()
            reporter.join(timeout=self._interval + 5)
        print(f"{label}: done in {time.monotonic() - started:.1f}s", flush=True)

    def _report(self, done: threading.Event) -> None:
        last = ""
        while not done.wait(self._interval):
            stages = []
            for stage_id in sorted(self._tracker.getActiveStageIds()):
                info = self._tracker.getStageInfo(stage_id)
                if info is not None:
                    stages.append(f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks")
            line = ", ".join(stages)
            if line and line != last:
                print(f"  {line}", flush=True)
                last = line


# The demo's own settings: both sides of the join shuffled (no broadcast), and every shuffle at
# `partitions` partitions instead of letting AQE coalesce them.
JOB_SETTINGS = {
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.adaptive.coalescePartitions.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


def _session(master: str, app_name: str) -> SparkSession:
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in JOB_SETTINGS.items():
        builder = builder.config(key, value)
    spark = configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def ui_address(spark: SparkSession) -> Optional[str]:
    """The address of the session's Spark UI, or None when the UI is off."""
    url = spark.sparkContext.uiWebUrl
    return str(url) if url else None


def keep_ui_open(spark: SparkSession, seconds: float) -> None:
    """Keeps the session (and its UI) up for ``seconds`` or until Ctrl-C."""
    url = ui_address(spark)
    where = f" at {url}/sluice/" if url else " (the UI is off)"
    print(
        f"Keeping the session open for {seconds:.0f}s so you can look at the Sluice tab{where}; Ctrl-C to stop.",
        flush=True,
    )
    try:
        time.sleep(seconds)
    except KeyboardInterrupt:
        print("stopping", flush=True)


def main(
    rows: int = ROWS,
    partitions: int = PARTITIONS,
    master: str = MASTER,
    keep_ui_seconds: Optional[float] = None,
) -> None:
    """Starts a Sluice session on ``master``, runs the demo job, prints its results and stops.

    Args:
        keep_ui_seconds: keep the Sluice session (and its UI) open this long after the job, or
            until Ctrl-C; None stops it at once.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.pop("SPARK_HOME", None)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    print(
        f"Sluice demo on {master}: 2 x {rows:,} rows, {partitions} shuffle partitions; starting Spark ...", flush=True
    )
    spark = _session(master, "sluice-demo")
    try:
        url = ui_address(spark)
        if url:
            print(f"Spark UI: {url} (Sluice tab: {url}/sluice/)", flush=True)
        result = run_job(spark, rows, partitions, Progress(spark).step)
        print_result(result)
        print_network_metrics(spark)
        if keep_ui_seconds is not None:
            keep_ui_open(spark, keep_ui_seconds)
    finally:
        spark.stop()


def compare_arguments(rows: int, partitions: int, master: str, rounds: int) -> List[str]:
    """The arguments of ``sluice compare`` that run this job (as a spark-submit application) ``rounds``
    times with each shuffle on ``master``."""
    settings = [arg for key, value in JOB_SETTINGS.items() for arg in ("--conf", f"{key}={value}")]
    job = [__file__, "--rows", str(rows), "--partitions", str(partitions)]
    return ["--rounds", str(rounds), "--", "--master", master, "--name", "sluice-demo", *settings, *job]


def run_as_application(argv: List[str]) -> None:
    """The job on the session spark-submit set up (whichever shuffle it chose), its results printed."""
    parser = argparse.ArgumentParser(prog="sluice/demo.py")
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--partitions", type=int, default=PARTITIONS)
    parsed = parser.parse_args(argv)
    spark = SparkSession.builder.getOrCreate()
    try:
        print_result(run_job(spark, parsed.rows, parsed.partitions))
    finally:
        spark.stop()


if __name__ == "__main__":
    run_as_application(sys.argv[1:])
