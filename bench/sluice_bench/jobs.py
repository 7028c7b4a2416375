"""The batch jobs the benchmarks time inside one contender's application (see ``worker``): the
shuffle-heavy DataFrame job, TPC-H's 22 queries, the memory job, the scale matrix, and all of
them on a real cluster (``sluice bench cluster``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice_bench import connections, tpch
from sluice_bench.compare import plain_rows
from sluice_bench.session import executor_probe, rest, stage_windows, stages_of_group, timed

# --- the shuffle-heavy job --------------------------------------------------------------------


def wide_rows(spark: SparkSession, rows: int, partitions: int, seed: int, keys: int) -> DataFrame:
    """``rows`` rows of about 100 bytes: a key over ``keys`` values, six pseudo-random longs and a
    32-character hex string, all derived from the row id (so they compress poorly, like real
    data, and every run sees the same rows)."""
    base = spark.range(0, rows, 1, partitions)
    return base.select(
        F.pmod(F.xxhash64("id", F.lit(seed)), F.lit(keys)).alias("k"),
        *[F.xxhash64("id", F.lit(seed + i)).alias(f"v{i}") for i in range(1, 7)],
        F.concat(F.hex(F.xxhash64("id", F.lit(seed + 7))), F.hex(F.xxhash64("id", F.lit(seed + 8)))).alias("s"),
    )


def heavy_job(spark: SparkSession, rows: int, partitions: int) -> List[List[Any]]:
    """Groups one wide input by key and joins the groups with a second wide input (a sort-merge
    join: broadcast joins are off), then reduces everything to checksums. Both big shuffles carry
    rows of about 100 bytes: the first input's partial aggregates (partial aggregation saves
    little with four rows per key, spread over all map tasks) and the second input whole. With
    AQE off, both shuffle managers run the same plan."""
    keys = max(1, rows // 4)
    left = wide_rows(spark, rows, partitions, seed=11, keys=keys)
    right = wide_rows(spark, rows // 2, partitions, seed=31, keys=keys)
    groups = left.groupBy("k").agg(
        F.count(F.lit(1)).alias("n"),
        F.sum(F.pmod("v1", F.lit(1_000_003))).alias("sv"),
        F.max("s").alias("ms"),
        *[(F.min if i % 2 == 0 else F.max)(f"v{i}").alias(f"m{i}") for i in range(2, 7)],
    )
    joined = groups.join(right, "k")
    out = joined.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum("n").alias("n"),
        F.bit_xor(F.xxhash64(*groups.columns, *[c for c in right.columns if c != "k"])).alias("checksum"),
    )
    return plain_rows([list(r) for r in out.collect()])


def sha2_job(spark: SparkSession, rows: int, partitions: int) -> List[List[Any]]:
    """A CPU-bound shuffle: each row's SHA-256 (a 64-character hex string) computed before the
    shuffle, beside its key and id; the rows repartitioned by key; a SHA-256 of every row computed
    again after it; reduced to checksums. About 100 bytes a row cross the shuffle, and hashing, not
    the shuffle, takes most of the time: on two cores every thread a shuffle adds competes with the
    tasks for the CPU."""
    df = spark.range(0, rows, 1, partitions).select(
        F.pmod(F.xxhash64("id"), F.lit(max(1, rows // 4))).alias("k"),
        F.col("id"),
        F.sha2(F.col("id").cast("string"), 256).alias("h"),
    )
    hashed = df.repartition(partitions, "k").select(
        "k", F.sha2(F.concat_ws(":", F.col("h"), F.col("id").cast("string")), 256).alias("h2")
    )
    out = hashed.agg(F.count(F.lit(1)).alias("rows"), F.sum("k").alias("keys"), F.bit_xor(F.xxhash64("h2")).alias("x"))
    return plain_rows([list(r) for r in out.collect()])


# The measured job of ``sluice bench batch`` (``--job``): its name -> the job.
SHUFFLE_JOBS: Dict[str, Callable[[SparkSession, int, int], List[List[Any]]]] = {"heavy": heavy_job, "sha2": sha2_job}


# --- TPC-H ----------------------------------------------------------------------------------


def register_tpch(spark: SparkSession, data_dir: str) -> None:
    for table in tpch.TABLES:
        spark.read.parquet(str(Path(data_dir) / f"{table}.parquet")).createOrReplaceTempView(table)


def run_query(spark: SparkSession, number: int) -> List[List[Any]]:
    return plain_rows([list(r) for r in spark.sql(tpch.QUERIES[number]).collect()])


def _query_job(spark: SparkSession, number: int) -> Callable[[], List[List[Any]]]:
    return lambda: run_query(spark, number)


def service_pid(contender: str, spec: Dict[str, Any]) -> Optional[int]:
    """The node service's JVM on this machine (``spec["service_pid"]``) when ``contender``'s
    outputs are served by it: its CPU is measured beside the executors'."""
    pid = spec.get("service_pid")
    return int(pid) if contender == "sluice-service" and pid is not None else None


def run_batch(spark: SparkSession, contender: str, spec: Dict[str, Any]) -> Dict[str, Any]:
    """``spec``: ``heavy`` ({rows, partitions, job, warm_rows} or null; ``job`` one of
    :data:`SHUFFLE_JOBS`, the heavy job when absent; ``warm_rows`` the warm-up job's rows, a fiftieth
    of ``rows`` when absent), ``tpch`` ({data_dir, queries} or null)."""
    out: Dict[str, Any] = {"contender": contender}
    heavy: Optional[Dict[str, Any]] = spec.get("heavy")
    query_spec: Optional[Dict[str, Any]] = spec.get("tpch")
    # Warm-up, unmeasured and the same for every contender: a small heavy job (shuffles, joins,
    # aggregations) and one TPC-H query (parquet scans).
    # The heavy job's joins are sort-merge joins (both inputs shuffled); TPC-H keeps Spark's
    # default broadcast threshold, as a user would.
    broadcast_default = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    warm_rows = int((heavy or {}).get("warm_rows") or max(10_000, int((heavy or {"rows": 500_000})["rows"]) // 50))
    shuffle_job = SHUFFLE_JOBS[str((heavy or {}).get("job", "heavy"))]
    shuffle_job(spark, warm_rows, int((heavy or {"partitions": 8})["partitions"]))
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", broadcast_default or "10485760")
    if query_spec is not None:
        register_tpch(spark, query_spec["data_dir"])
        run_query(spark, 3)
    if heavy is not None:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
        out["heavy"] = timed(
            spark,
            "heavy",
            lambda: shuffle_job(spark, int(heavy["rows"]), int(heavy["partitions"])),
            service_pid=service_pid(contender, spec),
        )
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", broadcast_default or "10485760")
    if query_spec is not None:
        queries: Dict[str, Any] = {}
        for number in query_spec["queries"]:
            queries[str(number)] = timed(
                spark, f"q{number}", _query_job(spark, int(number)), service_pid=service_pid(contender, spec)
            )
        out["tpch"] = queries
    return out


# --- memory ---------------------------------------------------------------------------------


def memory_job(spark: SparkSession, rows: int, partitions: int) -> List[List[Any]]:
    """A plain repartition of wide rows: every byte crosses the shuffle once."""
    df = wide_rows(spark, rows, partitions, seed=5, keys=max(1, rows))
    out = df.repartition(partitions, "k").agg(
        F.count(F.lit(1)).alias("rows"), F.bit_xor(F.xxhash64("k", "v1", "s")).alias("checksum")
    )
    return plain_rows([list(r) for r in out.collect()])


def executor_peaks(spark: SparkSession) -> Dict[str, Dict[str, Any]]:
    """Spark's own peak executor memory metrics (heap, off-heap, direct pool) per executor."""
    peaks: Dict[str, Dict[str, Any]] = {}
    try:
        for e in rest(spark, "executors"):
            if e.get("id") != "driver":
                peaks[str(e["id"])] = dict(e.get("peakMemoryMetrics") or {})
    except Exception as err:  # the REST API is informative only
        peaks["error"] = {"message": repr(err)}
    return peaks


def run_memory(spark: SparkSession, contender: str, spec: Dict[str, Any]) -> Dict[str, Any]:
    """``spec``: ``rows``, ``partitions``. Probes each executor's network memory around the job."""
    rows, partitions = int(spec["rows"]), int(spec["partitions"])
    memory_job(spark, max(10_000, rows // 50), partitions)  # warm-up
    before = executor_probe(spark, reset=True)
    run = timed(spark, "memory", lambda: memory_job(spark, rows, partitions))
    after = executor_probe(spark, reset=False)
    time.sleep(1.0)
    return {"contender": contender, "job": run, "before": before, "after": after, "spark_peaks": executor_peaks(spark)}


# --- scale ----------------------------------------------------------------------------------


def scale_job(spark: SparkSession, rows: int, maps: int, reduces: int) -> List[List[Any]]:
    spark.conf.set("spark.sql.shuffle.partitions", str(reduces))
    df = wide_rows(spark, rows, maps, seed=3, keys=max(1, rows // 4))
    out = (
        df.groupBy("k")
        .agg(F.count(F.lit(1)).alias("n"), F.sum(F.pmod("v1", F.lit(1_000_003))).alias("sv"))
        .agg(F.count(F.lit(1)), F.sum("n"), F.bit_xor(F.xxhash64("k", "n", "sv")))
    )
    return plain_rows([list(r) for r in out.collect()])


# Sluice's fan-in metrics of a reading task (see docs/metrics.md).
FAN_IN = ("numInputGates", "numInputChannels", "numPartitionRequests", "numControlMessages", "numBuffersInRemote")


def fan_in(spark: SparkSession, stages: List[int]) -> Dict[str, Any]:
    """How Sluice's reducers of ``stages`` read: per reading task its channels, partition requests,
    control messages (requests, EndOfPartition frames, AddCredit messages) and remote frames
    received, as means over the tasks (and the most channels any task opened)."""
    import sluice

    wanted = set(stages)
    table = sluice.metrics(spark).select(["stage_id", *FAN_IN]).to_pylist()
    readers = [r for r in table if r["stage_id"] in wanted and (r["numInputChannels"] or 0) > 0]
    if not readers:
        return {"readers": 0}
    n = len(readers)
    return {
        "readers": n,
        "channels_max": max(r["numInputChannels"] for r in readers),
        **{f"{name}_mean": sum(r[name] or 0 for r in readers) / n for name in FAN_IN},
    }


def shuffle_port(executor: Dict[str, Any]) -> int:
    """The port an executor serves shuffle data on: Sluice's server port, or, in an application of
    Spark's own shuffle (no Sluice port), its block manager's."""
    sluice_port = int(executor.get("sluice_port", -1))
    return sluice_port if sluice_port > 0 else int(executor.get("block_manager_port", -1))


class ConnectionWatcher:
    """Samples, from this machine's /proc, the established TCP connections between the executors'
    shuffle ports (:func:`shuffle_port`) while a job runs; keeps the most seen per (client
    executor, server executor). It runs for both contenders, so both pay for its sampling."""

    def __init__(self, executors: List[Dict[str, Any]]) -> None:
        self.executors = [e for e in executors if shuffle_port(e) > 0]
        self.peak: Dict[str, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "ConnectionWatcher":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(0.2):
                break
        self.sample()

    def sample(self) -> None:
        counts = connections.sluice_connections(
            {str(e["executor_id"]): int(e["pid"]) for e in self.executors},
            {str(e["executor_id"]): shuffle_port(e) for e in self.executors},
        )
        self.samples += 1
        for pair, n in counts.items():
            self.peak[pair] = max(self.peak.get(pair, 0), n)


class JobDeadline:
    """Cancels job group ``group`` when ``seconds`` (None: never) pass before the block ends, so
    that a job that runs too long becomes an error of that job, not of the whole application."""

    def __init__(self, spark: SparkSession, group: str, seconds: Optional[float]) -> None:
        self.seconds = seconds
        self.expired = threading.Event()
        self._timer = None if seconds is None else threading.Timer(seconds, self._cancel, (spark, group))

    def _cancel(self, spark: SparkSession, group: str) -> None:
        self.expired.set()
        spark.sparkContext.cancelJobGroup(group)

    def __enter__(self) -> "JobDeadline":
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def error(self, e: BaseException) -> str:
        """What went wrong, saying first when the deadline cancelled the job."""
        text = f"{type(e).__name__}: {e}"
        if self.expired.is_set():
            text = f"no answer within {self.seconds:.0f} s (the benchmark cancelled the job): {text}"
        return text[:4000]


def run_scale(spark: SparkSession, contender: str, spec: Dict[str, Any]) -> Dict[str, Any]:
    """``spec``: ``configs``, a list of {name, rows, maps, reduces}, optionally ``warmup`` (one
    such config; default the first) and ``job_timeout_s`` (after which a config's job is
    cancelled and recorded as failed); each config runs once, timed. A config whose job fails is
    recorded with its error (and ``elapsed_s``, the seconds until it failed) and the next one
    still runs. Before each config every executor is
    probed (which starts and resets the probe's 1 ms sampler thread) and the connections between
    the executors are watched while it runs, for both contenders alike, so both pay for the
    sampling; after it, Sluice's executors are probed again for their peak of used network
    segments against their budget."""
    configs: List[Dict[str, Any]] = spec["configs"]
    warmup = spec.get("warmup") or configs[0]
    try:  # unmeasured
        scale_job(spark, int(warmup["rows"]), int(warmup["maps"]), int(warmup["reduces"]))
    except Exception as e:  # the measured run of the same shape reports it
        print(f"warm-up failed: {e!r}"[:2000], flush=True)
    executors = executor_probe(spark, reset=False)
    runs: Dict[str, Any] = {}
    for config in configs:
        watcher = ConnectionWatcher(executors)
        rows, maps, reduces = int(config["rows"]), int(config["maps"]), int(config["reduces"])
        if executors:
            executor_probe(spark, reset=True)
        started = time.monotonic()
        with watcher, JobDeadline(spark, config["name"], spec.get("job_timeout_s")) as deadline:
            try:
                run = timed(
                    spark,
                    config["name"],
                    lambda: scale_job(spark, rows, maps, reduces),  # noqa: B023 (called at once, in the loop)
                    service_pid=service_pid(contender, spec),
                )
            except Exception as e:
                spark.sparkContext.setJobGroup("", "")
                run = {"seconds": None, "answer": None, "error": deadline.error(e)}
                run["elapsed_s"] = round(time.monotonic() - started, 1)
        if contender in ("sluice", "sluice-service") and not run.get("error"):
            try:
                run["fan_in"] = fan_in(spark, stages_of_group(spark, config["name"]))
            except Exception as e:  # reported beside the run; the timing stands
                run["fan_in"] = {"error": f"{type(e).__name__}: {e}"[:2000]}
        if watcher.executors:
            run["connections"] = watcher.peak
            run["connection_samples"] = watcher.samples
            if contender in ("sluice", "sluice-service"):
                run["network_memory"] = network_memory(executor_probe(spark, reset=False))
        runs[config["name"]] = run
    return {"contender": contender, "runs": runs, "executors": executors}


def network_memory(probes: List[Dict[str, Any]]) -> Dict[str, int]:
    """The most any executor used of its network buffers since the last reset (segments the
    1 ms sampler saw in use), and its budget (the pool's segments), in bytes."""
    return {
        "peak_used_bytes": max((int(e["peak_used_segments"]) * int(e["segment_size"]) for e in probes), default=0),
        "budget_bytes": max((int(e["total_segments"]) * int(e["segment_size"]) for e in probes), default=0),
    }


# --- on a real cluster ----------------------------------------------------------------------


def run_cluster(spark: SparkSession, contender: str, spec: Dict[str, Any]) -> Dict[str, Any]:
    """``sluice bench cluster``'s application: the batch jobs of ``run_batch`` (``heavy``,
    ``tpch``), then ``wide`` ({rows, maps, reduces} or null), a wide shuffle of the scale matrix.
    Each timed job also gets its stages' wall-clock windows (``stages``), from which the
    benchmark picks the reduce stage whose link traffic it measures."""
    out = run_batch(spark, contender, spec)
    wide: Optional[Dict[str, Any]] = spec.get("wide")
    if wide is not None:
        rows, maps, reduces = int(wide["rows"]), int(wide["maps"]), int(wide["reduces"])
        out["wide"] = timed(
            spark, "wide", lambda: scale_job(spark, rows, maps, reduces), service_pid=service_pid(contender, spec)
        )
    groups = [("heavy", out.get("heavy")), ("wide", out.get("wide"))]
    groups += [(f"q{q}", r) for q, r in out.get("tpch", {}).items()]
    for group, run in groups:
        if run is not None:
            run["stages"] = stage_windows(spark, stages_of_group(spark, group))
    return out
