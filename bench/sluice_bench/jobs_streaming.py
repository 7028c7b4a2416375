"""The Real-Time Mode query `sluice bench latency` measures inside one contender's application.

A JVM-side source generates records ``(created_us, phase, key)`` at fixed rates, stepping
through the rates of the spec; each step is first run unmeasured (warm-up) and then measured.
With ``source`` ``scheduled`` (the default) the records are generated on the executors, evenly
spaced (``ScheduledRateStream``); with ``driver`` a driver thread adds them to Spark's
``LowLatencyMemoryStream``, whose readers fetch them by RPC, so they arrive in small bursts
(``DriverFedStream``). The query stamps every record on the map side
(``map_us``), shuffles it by key (two shuffle partitions, a pipelined shuffle) into a stateful
``groupBy(key, phase).count()`` and writes the updates, in update mode, into
``LatencyProbeWriter``, which records per output row ``now - created_us`` (end to end) and
``now - map_us`` (from before the shuffle) into histograms per phase.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice_bench.histogram import Histogram, merge_files
from sluice_bench.session import jvm_class

BENCH = "org.apache.spark.shuffle.sluice.bench"
TRICKLE_PHASE = 10_000


def run_latency(spark: SparkSession, contender: str, spec: Dict[str, Any]) -> Dict[str, Any]:
    """``spec``: ``rates`` (records/s), ``warmup_s``, ``measure_s``, ``keys``, ``partitions``,
    ``batch_duration`` (Real-Time Mode's batch length), ``initial_warmup_s``, ``source``
    (``scheduled`` or ``driver``)."""
    partitions = int(spec.get("partitions", 2))
    rates: List[int] = [int(r) for r in spec["rates"]]
    warmup_ms, measure_ms = int(float(spec["warmup_s"]) * 1000), int(float(spec["measure_s"]) * 1000)
    # The schedule: start-up and JIT warm-up at the middle rate, then each rate unmeasured and
    # measured, then a trickle that makes every task write its histograms once more.
    steps: List[Tuple[int, int, int]] = [
        (0, rates[len(rates) // 2], int(float(spec.get("initial_warmup_s", 15)) * 1000))
    ]
    for i, rate in enumerate(rates):
        steps += [(2 * i + 1, rate, warmup_ms), (2 * i + 2, rate, measure_ms)]
    steps.append((TRICKLE_PHASE, 200, 4000))
    work = Path(tempfile.mkdtemp(prefix="sluice-bench-latency-"))
    jss = spark._jsparkSession
    jvm: Any = spark.sparkContext._jvm
    gateway: Any = spark.sparkContext._gateway
    jvm_class(spark, f"{BENCH}.ScheduledRateStream").registerNowUdf(jss)

    def longs(values: List[int]) -> Any:
        array = gateway.new_array(jvm.long, len(values))
        for i, v in enumerate(values):
            array[i] = v
        return array

    def ints(values: List[int]) -> Any:
        array = gateway.new_array(jvm.int, len(values))
        for i, v in enumerate(values):
            array[i] = v
        return array

    start_delay_ms = 2000
    driver_fed = spec.get("source", "scheduled") == "driver"
    stream_class = jvm_class(spark, f"{BENCH}.{'DriverFedStream' if driver_fed else 'ScheduledRateStream'}")
    stream = stream_class.create(
        jss,
        partitions,
        int(spec.get("keys", 1000)),
        start_delay_ms,
        ints([s[0] for s in steps]),
        longs([s[1] for s in steps]),
        longs([s[2] for s in steps]),
    )
    source = DataFrame(stream.toScheduledDF(), spark)
    query_df = (
        source.select("created_us", "phase", "key", F.expr("sluice_bench_now_us()").alias("map_us"))
        .groupBy("key", "phase")
        .agg(F.count(F.lit(1)).alias("n"), F.max("created_us").alias("created_us"), F.max("map_us").alias("map_us"))
    )
    writer = jvm_class(spark, f"{BENCH}.LatencyProbeWriter")
    started = time.monotonic()
    query = writer.start(
        query_df._jdf, str(work / "hist"), str(work / "checkpoint"), spec.get("batch_duration", "30 seconds")
    )
    if driver_fed:
        _wait_for_tasks(spark, query, 2 * partitions)
        started = time.monotonic()
        stream.start()
    try:
        total_s = start_delay_ms / 1000 + sum(s[2] for s in steps) / 1000
        _sleep_checking(query, total_s - (time.monotonic() - started) + 1.0)
    finally:
        if driver_fed:
            stream.stop()
        query.stop()
    merged = merge_files(sorted((work / "hist").glob("latency-*.json")))
    out_phases: List[Dict[str, Any]] = []
    for phase, rate, duration_ms in steps:
        if phase == 0 or phase == TRICKLE_PHASE or phase % 2 == 1:
            continue
        e2e = merged.get(f"e2e/{phase}", Histogram())
        shuffle = merged.get(f"shuffle/{phase}", Histogram())
        scheduled = rate * duration_ms // 1000 // partitions * partitions
        out_phases.append(
            {
                "rate": rate,
                "phase": phase,
                "seconds": duration_ms / 1000,
                "scheduled": scheduled,
                "received": e2e.count,
                "e2e": e2e.summary(),
                "shuffle": shuffle.summary(),
            }
        )
    result: Dict[str, Any] = {"contender": contender, "phases": out_phases}
    if contender == "sluice":
        result["network_latency"] = _sluice_marker_latency(spark)
    shutil.rmtree(work, ignore_errors=True)
    return result


def _wait_for_tasks(spark: SparkSession, query: Any, tasks: int, timeout_s: float = 180.0) -> None:
    """Waits until ``tasks`` tasks run at once (a real-time batch's map and reduce tasks)."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + timeout_s
    running = 0
    while time.monotonic() < deadline:
        stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        running = sum(s.numActiveTasks for s in stages if s is not None)
        if running >= tasks:
            return
        _sleep_checking(query, 0.2)
    raise RuntimeError(f"the Real-Time Mode query ran {running} of its {tasks} tasks after {timeout_s:.0f} s")


def _sleep_checking(query: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        error = query.exception()  # a JVM scala.Option[StreamingQueryException]
        if error.isDefined():
            raise RuntimeError(f"the Real-Time Mode query failed: {error.get()}")
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(0.5, left))


def _sluice_marker_latency(spark: SparkSession) -> Dict[str, Any]:
    """Sluice's latency markers (time spent in the network stack) over the reduce tasks."""
    try:
        import sluice

        table = sluice.metrics(spark)
    except Exception as e:  # informative only
        return {"error": repr(e)}
    if "latency_p99_ms" not in table.column_names:
        return {"tasks": 0}
    rows = [r for r in table.to_pylist() if r.get("latency_count")]
    return {
        "tasks": len(rows),
        "markers": int(sum(r["latency_count"] for r in rows)),
        "p50_ms": [r["latency_p50_ms"] for r in rows],
        "p99_ms": [r["latency_p99_ms"] for r in rows],
        "p999_ms": [r["latency_p999_ms"] for r in rows],
        "max_ms": [r["latency_max_ms"] for r in rows],
    }
