"""Sluice's network metrics and backpressure monitor from PySpark, as pyarrow tables.

Both functions read the driver's copy of the executors' metrics (the same data as the "Sluice"
tab of Spark's UI and its ``/sluice/json``); metric columns carry Flink's metric names. A classic
session reads it over py4j, a Spark Connect session through the plugin's ``sluice-metrics`` data
source on the Connect server; both give the same tables.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

import pyarrow as pa  # type: ignore[import-untyped]

from sluice import _connect
from sluice._jvm import call_accessor

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSparkSession

    # A classic session (py4j) or a Spark Connect client's session.
    Session = Union[SparkSession, ConnectSparkSession]

_TABLE = Path(__file__).resolve().parent / "_metrics.json"
_ARROW_TYPES = {"long": pa.int64(), "int": pa.int32(), "double": pa.float64()}


def _definitions() -> Tuple[str, Tuple[Dict[str, str], ...]]:
    """The metric table ``_metrics.json``, generated from the JVM's MetricNames by ``dev/gen-config``:
    the source name in Spark's metrics system and every metric with its scope, type and kind."""
    table = json.loads(_TABLE.read_text(encoding="utf-8"))
    return str(table["source"]), tuple(table["metrics"])


# The source Spark's metrics system publishes Sluice's metrics under:
# ``<spark.metrics.namespace, else the application id>.<executor id>.sluice.<metric>``.
METRICS_SOURCE, _DEFINITIONS = _definitions()

# Flink's per-task network metrics, in the order of the table's columns, with their Arrow types.
FLINK_METRICS: Tuple[Tuple[str, Any], ...] = tuple(
    (d["name"], _ARROW_TYPES[d["type"]]) for d in _DEFINITIONS if d["scope"] == "task"
)

# Counters (Spark's metrics system exports them as counters) and the other metrics (gauges there).
FLINK_METRICS_COUNTERS: Tuple[str, ...] = tuple(
    d["name"] for d in _DEFINITIONS if d["scope"] == "task" and d["spark_kind"] == "counter"
)
FLINK_METRICS_GAUGES: Tuple[str, ...] = tuple(
    d["name"] for d in _DEFINITIONS if d["scope"] == "task" and d["spark_kind"] == "gauge"
)

# The executor's network memory, in Spark's metrics system only (Flink's *MemorySegments gauges).
EXECUTOR_METRICS: Tuple[str, ...] = tuple(
    d["name"] for d in _DEFINITIONS if d["scope"] == "executor" and d["spark_kind"] == "gauge"
)

ID_COLUMNS: Tuple[Tuple[str, Any], ...] = (
    ("executor_id", pa.string()),
    ("stage_id", pa.int32()),
    ("stage_attempt_id", pa.int32()),
    ("task_attempt_id", pa.int64()),
)

# What the task wrote: "blocking", "pipelined" or "" (read only), and for a pipelined partition the
# buffer timeout in effect (ms; 0 flushes every record, -1 only full buffers; null otherwise).
OUTPUT_COLUMNS: Tuple[Tuple[str, Any], ...] = (
    ("output_type", pa.string()),
    ("bufferTimeoutMs", pa.int64()),
)

# Latency statistics over all of a task's latency markers, in milliseconds (only when tracked).
LATENCY_STATS: Tuple[str, ...] = ("count", "min", "max", "mean", "p50", "p95", "p99", "p999")

LATENCY_HISTOGRAM = pa.struct(
    [("source_stage_id", pa.int32()), ("source_partition_id", pa.int32()), ("count", pa.int64())]
    + [(name, pa.float64()) for name in LATENCY_STATS[1:]]
)

LEVELS = ("OK", "LOW", "HIGH")

BACKPRESSURE_SCHEMA = pa.schema(
    [
        ("stage_id", pa.int32()),
        ("ratio", pa.float64()),
        ("level", pa.string()),
        ("root_cause", pa.string()),
        ("suggested_buffer_timeout_ms", pa.float64()),
        ("sampled_tasks", pa.int32()),
    ]
)


def _latency_column(stat: str) -> str:
    return f"latency_{stat}" if stat == "count" else f"latency_{stat}_ms"


def metrics_schema(with_latency: bool) -> Any:
    """The schema of :func:`metrics`' table, with or without the latency columns."""
    fields: List[Tuple[str, Any]] = list(ID_COLUMNS) + list(OUTPUT_COLUMNS) + list(FLINK_METRICS)
    if with_latency:
        fields += [(_latency_column(stat), pa.int64() if stat == "count" else pa.float64()) for stat in LATENCY_STATS]
        fields.append(("latency_histograms", pa.list_(LATENCY_HISTOGRAM)))
    return pa.schema(fields)


def metrics(spark: Session, *, wait: bool = True) -> Any:
    """Sluice's network metrics of every task attempt the driver heard of, one row each.

    Columns: ``executor_id``, ``stage_id``, ``stage_attempt_id``, ``task_attempt_id``,
    ``output_type`` (``"blocking"``, ``"pipelined"`` or ``""``), ``bufferTimeoutMs`` (the buffer
    timeout in effect for a pipelined producer, else null), then Flink's metric names (``outPoolUsage``,
    ``inPoolUsage``, ``floatingBuffersUsage``,
    ``exclusiveBuffersUsage``, ``numRecordsOut``, ``numRecordsIn``, ``numBytesOut``,
    ``numBytesIn``, ``numBytesInLocal``, ``numBytesInRemote``, ``numBuffersOut``, ``numBuffersInLocal``,
    ``numBuffersInRemote``, their ``...PerSecond`` rates, ``outputQueueLength``,
    ``inputQueueLength``, ``backPressuredTimeMsPerSecond``, ``busyTimeMsPerSecond``,
    ``idleTimeMsPerSecond``; see ``docs/metrics.md``). Once any task has tracked latency
    (``spark.sluice.latencyTracking.interval`` > 0), also ``latency_count``, ``latency_min_ms``,
    ``latency_max_ms``, ``latency_mean_ms``, ``latency_p50_ms``, ``latency_p95_ms``,
    ``latency_p99_ms``, ``latency_p999_ms`` over all of a task's markers (null for tasks without
    any) and ``latency_histograms``, one entry per histogram of the configured granularity.

    Args:
        spark: a session started with :func:`sluice.configure`, or a Spark Connect session
            (``SparkSession.builder.remote(...)``) of a Connect server that runs Sluice.
        wait: first wait (about two report intervals) until the executors have reported
            everything that happened before this call; False returns what the driver has now.

    Returns:
        A ``pyarrow.Table``, sorted by stage, partition and task attempt.

    Raises:
        RuntimeError: when the session does not run Sluice's plugin.
    """
    if _connect.is_connect_session(spark):
        payload = _connect.read_json(spark, view="metrics", wait=bool(wait))
    else:
        payload = call_accessor(spark, "metricsJson", bool(wait))
    tasks: Sequence[Dict[str, Any]] = payload.get("tasks", [])
    with_latency = any(task.get("latency_total") for task in tasks)
    schema = metrics_schema(with_latency)
    columns: Dict[str, List[Any]] = {name: [] for name in schema.names}
    for task in tasks:
        for name, _ in ID_COLUMNS + OUTPUT_COLUMNS + FLINK_METRICS:
            columns[name].append(task.get(name))
        if with_latency:
            total: Optional[Dict[str, Any]] = task.get("latency_total")
            for stat in LATENCY_STATS:
                columns[_latency_column(stat)].append(None if total is None else total.get(stat))
            columns["latency_histograms"].append(
                [
                    {
                        "source_stage_id": h["source_stage_id"],
                        "source_partition_id": h["source_partition_id"],
                        **{stat: h.get(stat) for stat in LATENCY_STATS},
                    }
                    for h in task.get("latency", [])
                ]
            )
    return pa.Table.from_pydict(columns, schema=schema)


def backpressure(spark: Session, stage_id: Optional[int] = None) -> Any:
    """The backpressure monitor: samples the running tasks of a stage (or of every stage) and
    classifies them as Flink does.

    A running stage's task threads are sampled (``spark.sluice.backpressure.numSamples`` stack
    traces, ``delayBetweenSamples`` apart, cached for ``refreshInterval``); the ratio of samples
    blocked on a buffer request gives the level: ``OK`` up to 0.10, ``LOW`` up to 0.5, ``HIGH``
    above. A stage's ratio is its highest task's. Stages that no longer run keep their last
    sample, or ratio 0 and ``OK`` with ``sampled_tasks`` 0 when none was taken. ``root_cause``
    reads the stage's and its upstream stage's pool usages as the tables of "Flink Network Stack Vol. 2" do, and
    ``suggested_buffer_timeout_ms`` follows from the fill rate of remote buffers (null without
    remote pipelined input).

    Args:
        spark: a session started with :func:`sluice.configure`, or a Spark Connect session of a
            Connect server that runs Sluice.
        stage_id: one stage, or None for every stage the driver knows.

    Returns:
        A ``pyarrow.Table`` with columns ``stage_id``, ``ratio``, ``level``, ``root_cause``,
        ``suggested_buffer_timeout_ms`` and ``sampled_tasks``, newest stage first.

    Raises:
        TypeError: when ``stage_id`` is not an int or None.
        ValueError: when ``stage_id`` is negative.
        RuntimeError: when the session does not run Sluice's plugin.
    """
    if stage_id is not None and (isinstance(stage_id, bool) or not isinstance(stage_id, int)):
        raise TypeError(f"stage_id must be an int or None, got {stage_id!r}")
    if stage_id is not None and stage_id < 0:
        raise ValueError(f"stage_id must be >= 0, got {stage_id}")
    wanted = -1 if stage_id is None else stage_id
    if _connect.is_connect_session(spark):
        payload = _connect.read_json(spark, view="backpressure", stageId=wanted)
    else:
        payload = call_accessor(spark, "backpressureJson", wanted)
    rows: List[Dict[str, Any]] = []
    for stage in payload.get("stages", []):
        sample: Optional[Dict[str, Any]] = stage.get("backpressure")
        rows.append(
            {
                "stage_id": stage["stage_id"],
                "ratio": float(stage["ratio"]),
                "level": stage["level"],
                "root_cause": stage["root_cause"],
                "suggested_buffer_timeout_ms": stage.get("suggested_buffer_timeout_ms"),
                "sampled_tasks": 0 if sample is None else int(sample["sampled_tasks"]),
            }
        )
    return pa.Table.from_pylist(rows, schema=BACKPRESSURE_SCHEMA)
