"""A shuffle-heavy PySpark job on a local two-executor cluster, run through Sluice.

Two inputs of two million rows with pseudo-random keys are aggregated (groupBy over 200 shuffle
partitions) and joined (a sort-merge join: broadcast joins are off, so both sides are
shuffled), so most of the work crosses Sluice's network stack between the two executors.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Tuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice.config import configure
from sluice.monitoring import metrics

MASTER = "local-cluster[2,1,1024]"
ROWS = 2_000_000
PARTITIONS = 200


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


def run_job(spark: SparkSession, rows: int = ROWS, partitions: int = PARTITIONS) -> DemoResult:
    """Runs the aggregation and the join on ``spark`` and returns their results."""
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    started = time.monotonic()
    left = keyed_rows(spark, rows, seed=1)
    right = keyed_rows(spark, rows, seed=7)

    groups = left.groupBy("key").agg(F.count(F.lit(1)).alias("n"), F.sum("value").alias("total")).cache()
    summary = groups.agg(
        F.count(F.lit(1)).alias("groups"),
        F.sum("total").alias("total"),
        F.bit_xor(F.xxhash64("key", "n", "total")).alias("checksum"),
    ).first()
    top = groups.orderBy(F.desc("n"), F.desc("total"), "key").limit(10).collect()

    joined = left.join(right, "key").agg(
        F.count(F.lit(1)).alias("rows"),
        F.bit_xor(F.xxhash64("key", left["value"], right["value"])).alias("checksum"),
    ).first()
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
    print(
        f"groupBy(key).agg(count, sum): {result.groups:,} groups, "
        f"sum of values {result.aggregated_total:,}"
    )
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
        [str(row["stage_id"]), str(row["tasks"])] + [f"{row[name]:,}" for name, _ in NETWORK_COLUMNS]
        for row in rows
    ]
    totals = ["total", f"{sum(r['tasks'] for r in rows)}"] + [
        f"{sum(r[name] for r in rows):,}" for name, _ in NETWORK_COLUMNS
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells + [totals])) for i, h in enumerate(headers)]
    print("network metrics (sluice.metrics, summed per stage):")
    print("  " + "  ".join(h.rjust(w) for h, w in zip(headers, widths)))
    for line in cells + [totals]:
        print("  " + "  ".join(c.rjust(w) for c, w in zip(line, widths)))


def main(rows: int = ROWS, partitions: int = PARTITIONS, master: str = MASTER) -> None:
    """Starts a Sluice session on ``master``, runs the demo job, prints its results and stops."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.pop("SPARK_HOME", None)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName("sluice-demo")
        .config("spark.sql.autoBroadcastJoinThreshold", "-1")
        # Keep every shuffle at `partitions` partitions instead of letting AQE coalesce them.
        .config("spark.sql.adaptive.coalescePartitions.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    spark = configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        print(f"Sluice demo on {master}, {partitions} shuffle partitions")
        print_result(run_job(spark, rows, partitions))
        print_network_metrics(spark)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
