"""Sluice's network metrics, batch diagnosis and backpressure monitor from PySpark, as pyarrow tables.

Every function reads the driver's copy of the executors' metrics (the same data as the "Sluice"
tab of Spark's UI and its ``/sluice/json``). A classic session reads it over py4j, a Spark Connect
session through the plugin's ``sluice-metrics`` data source on the Connect server; both give the
same tables.

One naming rule for every table, the tab and its JSON (``docs/metrics.md``): a column that carries
one of Flink's network metrics has Flink's exact name (``numBytesInRemote``, ``outPoolUsage``,
``TotalMemorySegments``); every other column is snake_case, times end in their unit (``_ms``), and
no column has a bare generic name (``backpressure_level``, not ``level``). Every function takes the
session first and keyword-only filters after it, and returns rows in ascending order of their ids
(executors by number, the driver first). pandas is not a dependency: with it installed,
``table.to_pandas()`` gives a DataFrame.
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

# The executor's network memory (Flink's *MemorySegments gauges) and its Sluice server's reads of
# partition files (Sluice's), in Spark's metrics system and :func:`executors`.
EXECUTOR_METRICS: Tuple[str, ...] = tuple(
    d["name"] for d in _DEFINITIONS if d["scope"] == "executor" and d["spark_kind"] == "gauge"
)
SERVER_METRICS: Tuple[str, ...] = tuple(
    d["name"] for d in _DEFINITIONS if d["scope"] == "executor" and d["type"] == "long" and d["spark_kind"] == "gauge"
)
# The executor's own counters (Sluice's): index bytes its readers read and needed.
EXECUTOR_COUNTERS: Tuple[str, ...] = tuple(
    d["name"] for d in _DEFINITIONS if d["scope"] == "executor" and d["spark_kind"] == "counter"
)

ID_COLUMNS: Tuple[Tuple[str, Any], ...] = (
    ("executor_id", pa.string()),
    ("stage_id", pa.int32()),
    ("stage_attempt_id", pa.int32()),
    ("partition_id", pa.int32()),
    ("task_attempt_id", pa.int64()),
    ("running", pa.bool_()),
    ("started_at_ms", pa.int64()),
    ("timestamp_ms", pa.int64()),
)

# What the task wrote: "blocking", "pipelined" or "" (read only), and for a pipelined partition the
# buffer timeout in effect (ms; 0 flushes every record, -1 only full buffers; null otherwise); its
# waits for network buffers and, by producing executor, for input (ms).
OUTPUT_COLUMNS: Tuple[Tuple[str, Any], ...] = (
    ("output_type", pa.string()),
    ("buffer_timeout_ms", pa.int64()),
    ("buffer_wait_ms", pa.int64()),
    ("input_wait_by_producer_ms", pa.map_(pa.string(), pa.int64())),
)

# The stage a row belongs to, as Spark names it, and the jobs, job group and SQL execution it ran for
# (``sc.setJobGroup`` / ``spark.sql.execution.id``; null when none).
STAGE_COLUMNS: Tuple[Tuple[str, Any], ...] = (
    ("stage_name", pa.string()),
    ("job_ids", pa.list_(pa.int32())),
    ("job_group", pa.string()),
    ("sql_execution_id", pa.int64()),
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
        ("backpressure_ratio", pa.float64()),
        ("backpressure_level", pa.string()),
        ("cause", pa.string()),
        ("suggested_buffer_timeout_ms", pa.float64()),
        ("sampled_tasks", pa.int32()),
    ]
)


def _latency_column(stat: str) -> str:
    return f"latency_{stat}" if stat == "count" else f"latency_{stat}_ms"


def metrics_schema(with_latency: bool) -> Any:
    """The schema of :func:`metrics`' table, with or without the latency columns."""
    fields: List[Tuple[str, Any]] = list(ID_COLUMNS) + list(STAGE_COLUMNS) + list(OUTPUT_COLUMNS) + list(FLINK_METRICS)
    if with_latency:
        fields += [(_latency_column(stat), pa.int64() if stat == "count" else pa.float64()) for stat in LATENCY_STATS]
        fields.append(("latency_histograms", pa.list_(LATENCY_HISTOGRAM)))
    return pa.schema(fields)


def _check_id(name: str, value: Optional[int]) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"{name} must be an int or None, got {value!r}")
    if value is not None and value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def _wanted(stage: Dict[str, Any], job_id: Optional[int], stage_id: Optional[int]) -> bool:
    """Whether a stage object of the JSON passes the ``job_id`` / ``stage_id`` filters."""
    if stage_id is not None and int(stage["stage_id"]) != stage_id:
        return False
    return job_id is None or job_id in (stage.get("job_ids") or [])


def _payload(spark: Session, wait: bool) -> Dict[str, Any]:
    """Everything the driver holds (``/sluice/json``), over Spark Connect or py4j."""
    if _connect.is_connect_session(spark):
        return _connect.read_json(spark, view="metrics", wait=bool(wait))
    payload: Dict[str, Any] = call_accessor(spark, "metricsJson", bool(wait))
    return payload


def _stage_columns(stage: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The STAGE_COLUMNS of a stage object of the JSON (all null for a stage the driver forgot)."""
    if stage is None:
        return {name: None for name, _ in STAGE_COLUMNS}
    return {
        "stage_name": stage.get("stage_name"),
        "job_ids": list(stage.get("job_ids") or []),
        "job_group": stage.get("job_group"),
        "sql_execution_id": stage.get("sql_execution_id"),
    }


def metrics(
    spark: Session, *, job_id: Optional[int] = None, stage_id: Optional[int] = None, wait: bool = True
) -> pa.Table:
    """Sluice's network metrics of every task attempt the driver heard of, one row each.

    Columns: ``executor_id``, ``stage_id``, ``stage_attempt_id``, ``partition_id``,
    ``task_attempt_id``, ``running`` (false once the attempt ended), ``started_at_ms`` and
    ``timestamp_ms`` (when it started and when these figures were taken, ms since the epoch);
    ``stage_name``, ``job_ids``, ``job_group`` and ``sql_execution_id`` (to keep the rows of the
    query just run); ``output_type`` (``"blocking"``, ``"pipelined"`` or ``""``),
    ``buffer_timeout_ms`` (the buffer timeout in effect for a pipelined producer, else null),
    ``buffer_wait_ms`` (time the task waited for network buffers), ``input_wait_by_producer_ms``
    (time its readers waited for input, by producing executor); then Flink's metric names
    (``outPoolUsage``, ``inPoolUsage``, ``floatingBuffersUsage``, ``exclusiveBuffersUsage``,
    ``numRecordsOut``, ``numRecordsIn``, ``numBytesOut``, ``numBytesIn``, ``numBytesInLocal``,
    ``numBytesInRemote``, ``numBuffersOut``, ``numBuffersInLocal``, ``numBuffersInRemote``, the
    fan-in counters, their ``...PerSecond`` rates, ``outputQueueLength``, ``inputQueueLength``,
    ``backPressuredTimeMsPerSecond``, ``busyTimeMsPerSecond``, ``idleTimeMsPerSecond``; see
    ``docs/metrics.md``). Once any task has tracked latency (``spark.sluice.latencyTracking.interval``
    > 0), also ``latency_count``, ``latency_min_ms``, ``latency_max_ms``, ``latency_mean_ms``,
    ``latency_p50_ms``, ``latency_p95_ms``, ``latency_p99_ms``, ``latency_p999_ms`` over all of a
    task's markers (null for tasks without any) and ``latency_histograms``, one entry per histogram
    of the configured granularity.

    Args:
        spark: a session started with :func:`sluice.configure`, or a Spark Connect session
            (``SparkSession.builder.remote(...)``) of a Connect server that runs Sluice.
        job_id: only the tasks of that job's stages; None for every task.
        stage_id: only that stage's tasks; None for every task.
        wait: first wait (about two report intervals) until the executors have reported
            everything that happened before this call; False returns what the driver has now.

    Returns:
        A ``pyarrow.Table``, sorted by stage, stage attempt, partition and task attempt.

    Raises:
        TypeError: when ``job_id`` or ``stage_id`` is not an int or None.
        ValueError: when ``job_id`` or ``stage_id`` is negative.
        RuntimeError: when the session does not run Sluice's plugin.
    """
    _check_id("job_id", job_id)
    _check_id("stage_id", stage_id)
    payload = _payload(spark, wait)
    stages = {int(stage["stage_id"]): stage for stage in payload.get("stages", [])}
    tasks: Sequence[Dict[str, Any]] = payload.get("tasks", [])
    if job_id is not None or stage_id is not None:
        tasks = [
            t for t in tasks if _wanted(stages.get(int(t["stage_id"]), {"stage_id": t["stage_id"]}), job_id, stage_id)
        ]
    tasks = sorted(tasks, key=lambda t: (t["stage_id"], t["stage_attempt_id"], t["partition_id"], t["task_attempt_id"]))
    with_latency = any(task.get("latency_total") for task in tasks)
    schema = metrics_schema(with_latency)
    columns: Dict[str, List[Any]] = {name: [] for name in schema.names}
    for task in tasks:
        for name, _ in ID_COLUMNS + FLINK_METRICS:
            columns[name].append(task.get(name))
        for name, value in _stage_columns(stages.get(int(task["stage_id"]))).items():
            columns[name].append(value)
        columns["output_type"].append(task.get("output_type"))
        columns["buffer_timeout_ms"].append(task.get("buffer_timeout_ms"))
        columns["buffer_wait_ms"].append(task.get("buffer_wait_ms", 0))
        columns["input_wait_by_producer_ms"].append(list((task.get("input_wait_by_producer_ms") or {}).items()))
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


# A stage's sums over its tasks (Flink's counters) and highest usages, under Flink's names.
STAGE_METRICS: Tuple[Tuple[str, Any], ...] = tuple(
    (name, pa.int64())
    for name in (
        "numRecordsOut",
        "numRecordsIn",
        "numBytesOut",
        "numBytesIn",
        "numBytesInLocal",
        "numBytesInRemote",
        "numBuffersOut",
        "numBuffersInLocal",
        "numBuffersInRemote",
    )
) + tuple(
    (name, pa.float64())
    for name in (
        "outPoolUsage",
        "inPoolUsage",
        "floatingBuffersUsage",
        "exclusiveBuffersUsage",
        "backPressuredTimeMsPerSecond",
    )
)

# The figures the batch diagnosis of a batch (blocking-shuffle) stage read (see docs/metrics.md); its
# sentence is the stage's ``cause``; null for pipelined stages.
BATCH_COLUMNS: Tuple[Tuple[str, Any], ...] = (
    ("executor_run_time_ms", pa.int64()),
    ("fetch_wait_ms", pa.int64()),
    ("buffer_wait_ms", pa.int64()),
    ("spill_bytes", pa.int64()),
    ("max_partition_id", pa.int32()),
    ("max_partition_bytes", pa.int64()),
    ("median_partition_bytes", pa.int64()),
    ("slow_peer", pa.string()),
    ("slow_peer_wait_ms", pa.int64()),
    ("slow_executor", pa.string()),
    ("slow_executor_ratio", pa.float64()),
)

STAGES_SCHEMA = pa.schema(
    [
        ("stage_id", pa.int32()),
        ("stage_attempt_id", pa.int32()),
        *STAGE_COLUMNS,
        ("status", pa.string()),
        ("num_tasks", pa.int32()),
        ("reported_tasks", pa.int32()),
        ("running_tasks", pa.int32()),
        ("batch", pa.bool_()),
        ("cause", pa.string()),
        *BATCH_COLUMNS,
        ("fetch_wait_share", pa.float64()),
        ("skew_ratio", pa.float64()),
        ("backpressure_level", pa.string()),
        ("backpressure_ratio", pa.float64()),
        ("buffer_fill_rate", pa.float64()),
        ("suggested_buffer_timeout_ms", pa.float64()),
        *STAGE_METRICS,
    ]
)


def _stage_row(stage: Dict[str, Any]) -> Dict[str, Any]:
    batch: Optional[Dict[str, Any]] = stage.get("batch")
    row: Dict[str, Any] = {
        "stage_id": stage["stage_id"],
        "stage_attempt_id": stage["stage_attempt_id"],
        **_stage_columns(stage),
        "status": stage.get("status"),
        "num_tasks": stage.get("num_tasks"),
        "reported_tasks": stage.get("reported_tasks"),
        "running_tasks": stage.get("running_tasks"),
        "batch": batch is not None,
        "cause": stage.get("cause"),
        "backpressure_level": stage.get("backpressure_level"),
        "backpressure_ratio": stage.get("backpressure_ratio"),
        "buffer_fill_rate": stage.get("buffer_fill_rate"),
        "suggested_buffer_timeout_ms": stage.get("suggested_buffer_timeout_ms"),
        **{name: stage.get(name) for name, _ in STAGE_METRICS},
    }
    for name, _ in BATCH_COLUMNS:
        row[name] = None if batch is None else batch.get(name)
    run = None if batch is None else batch.get("executor_run_time_ms")
    row["fetch_wait_share"] = None if batch is None or not run else batch["fetch_wait_ms"] / run
    median = None if batch is None else batch.get("median_partition_bytes")
    row["skew_ratio"] = None if batch is None or not median else batch["max_partition_bytes"] / median
    return row


def stages(
    spark: Session, *, job_id: Optional[int] = None, stage_id: Optional[int] = None, wait: bool = True
) -> pa.Table:
    """Every stage Sluice has metrics of, one row each, with its diagnosis.

    Columns: ``stage_id``, ``stage_attempt_id``, ``stage_name``, ``job_ids``, ``job_group``,
    ``sql_execution_id``, ``status``, ``num_tasks``, ``reported_tasks``, ``running_tasks``;
    ``batch`` (a blocking-shuffle stage) and ``cause``, the stage's one diagnosis sentence: the
    batch diagnosis of a batch stage, the backpressure sentence of a pipelined one. For batch
    stages, the figures the batch diagnosis read: ``executor_run_time_ms`` and ``fetch_wait_ms``
    (Spark's task metrics, summed), ``fetch_wait_share``, ``buffer_wait_ms`` (waits for network
    buffers), ``spill_bytes``, ``max_partition_id`` / ``max_partition_bytes`` /
    ``median_partition_bytes`` / ``skew_ratio`` (the reduce partition that read most),
    ``slow_peer`` / ``slow_peer_wait_ms`` (the producing executor readers waited on, when one
    stands out), ``slow_executor`` / ``slow_executor_ratio`` (a straggling executor); then
    ``backpressure_level`` and ``backpressure_ratio`` (the last sample; see :func:`backpressure`),
    ``buffer_fill_rate`` and ``suggested_buffer_timeout_ms``; then the stage's sums and highest
    usages under Flink's names.

    Args:
        spark: a session started with :func:`sluice.configure`, or a Spark Connect session of a
            Connect server that runs Sluice.
        job_id: only that job's stages (``job_ids`` holds it); None for every stage.
        stage_id: only that stage; None for every stage.
        wait: as for :func:`metrics`.

    Returns:
        A ``pyarrow.Table`` sorted by stage and stage attempt.

    Raises:
        TypeError: when ``job_id`` or ``stage_id`` is not an int or None.
        ValueError: when ``job_id`` or ``stage_id`` is negative.
        RuntimeError: when the session does not run Sluice's plugin.
    """
    _check_id("job_id", job_id)
    _check_id("stage_id", stage_id)
    stages = [s for s in _payload(spark, wait).get("stages", []) if _wanted(s, job_id, stage_id)]
    rows = sorted((_stage_row(s) for s in stages), key=lambda r: (r["stage_id"], r["stage_attempt_id"]))
    return pa.Table.from_pylist(rows, schema=STAGES_SCHEMA)


EXECUTORS_SCHEMA = pa.schema(
    [
        ("executor_id", pa.string()),
        ("last_report_ms", pa.int64()),
        ("segment_size", pa.int32()),
        *[(name, pa.int32()) for name in ("TotalMemorySegments", "AvailableMemorySegments", "UsedMemorySegments")],
        ("server_port", pa.int32()),
        ("server_connections", pa.int32()),
        ("client_connections", pa.int32()),
        ("client_connections_opened", pa.int64()),
        *[(name, pa.int64()) for name in SERVER_METRICS],
        *[(name, pa.int64()) for name in EXECUTOR_COUNTERS],
    ]
)


def executor_order(executor_id: str) -> Tuple[int, int, str]:
    """The sort key of executor ids: the driver first, then numbers in numeric order ("2" before
    "10"), then any other id by name."""
    if executor_id == "driver":
        return (0, 0, "")
    if executor_id.isdigit():
        return (1, int(executor_id), "")
    return (2, 0, executor_id)


def executors(spark: Session, *, wait: bool = True) -> pa.Table:
    """Every executor that reported, one row each: its network memory under Flink's names
    (``TotalMemorySegments``, ``AvailableMemorySegments``, ``UsedMemorySegments``, of
    ``segment_size`` bytes), ``last_report_ms``, its transport (``server_port``, the
    ``server_connections`` other executors opened to it, the ``client_connections`` it holds and
    the ``client_connections_opened`` since it started), its server's reads of partition files
    (``readThreads``, ``readQueueLength``, ``readWaitTimeMs``, ``TotalReadMemorySegments``,
    ``UsedReadMemorySegments``, ``partitionFileDescriptors``) and its readers' index reads
    (``indexBytesRead`` against ``indexBytesNeeded``).

    Args:
        spark: a session started with :func:`sluice.configure`, or a Spark Connect session of a
            Connect server that runs Sluice.
        wait: as for :func:`metrics`.

    Returns:
        A ``pyarrow.Table`` sorted by executor id as a number ("2" before "10").

    Raises:
        RuntimeError: when the session does not run Sluice's plugin.
    """
    rows = [{name: e.get(name) for name in EXECUTORS_SCHEMA.names} for e in _payload(spark, wait).get("executors", [])]
    rows.sort(key=lambda r: executor_order(str(r["executor_id"])))
    return pa.Table.from_pylist(rows, schema=EXECUTORS_SCHEMA)


def backpressure(
    spark: Session, *, job_id: Optional[int] = None, stage_id: Optional[int] = None, wait: bool = True
) -> pa.Table:
    """The backpressure monitor: samples the running tasks of a stage (or of every stage) and
    classifies them as Flink does.

    A running stage's task threads are sampled (``spark.sluice.backpressure.numSamples`` stack
    traces, ``delayBetweenSamples`` apart, cached for ``refreshInterval``); the share of samples
    blocked on a buffer request, ``backpressure_ratio``, gives ``backpressure_level``: ``OK`` up to
    0.10, ``LOW`` up to 0.5, ``HIGH`` above. A stage's ratio is its highest task's. Stages that no
    longer run keep their last sample, or ratio 0 and ``OK`` with ``sampled_tasks`` 0 when none was
    taken. ``cause`` is the stage's diagnosis, as in :func:`stages`: for a pipelined stage it reads
    the stage's and its upstream stage's pool usages as the tables of "Flink Network Stack Vol. 2"
    do, and ``suggested_buffer_timeout_ms`` follows from the fill rate of remote buffers (null
    without remote pipelined input); backpressure is a matter of pipelined stages, and a batch
    stage's ``cause`` is its batch diagnosis.

    Args:
        spark: a session started with :func:`sluice.configure`, or a Spark Connect session of a
            Connect server that runs Sluice.
        job_id: only that job's stages; None for every stage.
        stage_id: one stage, or None for every stage the driver knows.
        wait: sample the running stages and wait for the samples (a few seconds); False returns
            the last samples the driver holds, without sampling.

    Returns:
        A ``pyarrow.Table`` with columns ``stage_id``, ``backpressure_ratio``,
        ``backpressure_level``, ``cause``, ``suggested_buffer_timeout_ms`` and ``sampled_tasks``,
        sorted by stage.

    Raises:
        TypeError: when ``job_id`` or ``stage_id`` is not an int or None.
        ValueError: when ``job_id`` or ``stage_id`` is negative.
        RuntimeError: when the session does not run Sluice's plugin.
    """
    _check_id("job_id", job_id)
    _check_id("stage_id", stage_id)
    if not wait:
        payload = _payload(spark, False)
    elif _connect.is_connect_session(spark):
        payload = _connect.read_json(spark, view="backpressure", stageId=-1 if stage_id is None else stage_id)
    else:
        payload = call_accessor(spark, "backpressureJson", -1 if stage_id is None else stage_id)
    rows: List[Dict[str, Any]] = []
    for stage in payload.get("stages", []):
        if not _wanted(stage, job_id, stage_id):
            continue
        sample: Optional[Dict[str, Any]] = stage.get("backpressure")
        rows.append(
            {
                "stage_id": stage["stage_id"],
                "backpressure_ratio": float(stage["backpressure_ratio"]),
                "backpressure_level": stage["backpressure_level"],
                "cause": stage["cause"],
                "suggested_buffer_timeout_ms": stage.get("suggested_buffer_timeout_ms"),
                "sampled_tasks": 0 if sample is None else int(sample["sampled_tasks"]),
            }
        )
    rows.sort(key=lambda r: int(r["stage_id"]))
    return pa.Table.from_pylist(rows, schema=BACKPRESSURE_SCHEMA)
