"""The benchmarks' side of a contender's Spark application: its session, the driver's REST API,
timing a job group with Spark's shuffle metrics, and Sluice's executor probes."""

from __future__ import annotations

import datetime
import gc
import json
import os
import time
import urllib.request
from typing import Any, Callable, Dict, Iterable, List, Optional

import sluice
from pyspark.sql import SparkSession

from sluice_bench._jars import bench_jar_path

CONTENDERS = ("sluice", "sluice-service", "sort", "builtin", "floor")
# The floor of `sluice bench scale --floor`: a shuffle that moves nothing (benchmark jar).
DISCARDING_SHUFFLE_MANAGER = "org.apache.spark.shuffle.sluice.bench.DiscardingShuffleManager"


def build_session(contender: str, spec: Dict[str, Any]) -> SparkSession:
    """A session for ``contender``. Every contender has the benchmark jar (the executors' probes,
    the scheduled source, the latency sink) and Sluice's plugin jar (which the probes read when
    Sluice runs) on its class path; only ``sluice`` and ``sluice-service`` switch the shuffle
    managers and the plugin on (``sluice-service`` with its map outputs served by the node
    shuffle service at ``spec["service_port"]``, default 7338, of each executor's host), and
    ``floor`` runs a shuffle that moves nothing (:data:`DISCARDING_SHUFFLE_MANAGER`).
    ``spec["contender_conf"][contender]`` holds Spark settings of that contender's only."""
    if contender not in CONTENDERS:
        raise ValueError(f"unknown contender {contender!r}; one of {CONTENDERS}")
    builder = (
        SparkSession.builder.master(spec.get("master", "local-cluster[2,1,2048]"))
        .appName(f"sluice-bench-{spec.get('kind', 'app')}-{contender}")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.ui.enabled", "true")
    )
    for key, value in spec.get("conf", {}).items():
        builder = builder.config(key, str(value))
    for key, value in spec.get("contender_conf", {}).get(contender, {}).items():
        builder = builder.config(key, str(value))
    if contender in ("sluice", "sluice-service"):
        options = dict(spec.get("sluice_options", {}))
        if contender == "sluice-service":
            options.update(service_enabled=True, service_port=int(spec.get("service_port", 7338)))
        # sluice.configure appends the plugin jar to spark.jars.
        builder = sluice.configure(builder.config("spark.jars", bench_jar_path()), **options)
    else:
        builder = builder.config("spark.jars", f"{bench_jar_path()},{sluice.jar_path()}")
        manager = DISCARDING_SHUFFLE_MANAGER if contender == "floor" else "sort"
        builder = builder.config("spark.shuffle.manager", manager)
        for key, value in spec.get("builtin_conf", {}).items():
            builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def jvm_class(spark: SparkSession, name: str) -> Any:
    node: Any = spark.sparkContext._jvm
    for part in name.split("."):
        node = getattr(node, part)
    return node


def rest(spark: SparkSession, path: str) -> Any:
    """GET ``/api/v1/applications/<app>/<path>`` of the driver's UI."""
    url = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}/{path}"
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.loads(response.read().decode("utf-8"))


def stages_of_group(spark: SparkSession, group: str) -> List[int]:
    """The ids of every stage of every job of job group ``group`` (skipped ones included)."""
    tracker = spark.sparkContext.statusTracker()
    stages = set()
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        if info is not None:
            stages.update(info.stageIds)
    return sorted(stages)


# Spark's stage metrics (REST API names) summed per job, for reading where time goes.
STAGE_METRICS = {
    "executor_run_ms": "executorRunTime",
    "executor_cpu_ns": "executorCpuTime",
    "executor_deserialize_ms": "executorDeserializeTime",
    "jvm_gc_ms": "jvmGcTime",
    "shuffle_fetch_wait_ms": "shuffleFetchWaitTime",
    "shuffle_write_time_ns": "shuffleWriteTime",
    "tasks": "numCompleteTasks",
}


def shuffle_bytes(spark: SparkSession, stages: List[int]) -> Dict[str, int]:
    """Spark's shuffle metrics and stage times summed over ``stages`` (skipped stages count nothing)."""
    totals = {"shuffle_write_bytes": 0, "shuffle_read_bytes": 0, "shuffle_write_records": 0, "stages": 0}
    totals.update({name: 0 for name in STAGE_METRICS})
    for stage in stages:
        try:
            attempts = rest(spark, f"stages/{stage}")
        except Exception:  # a stage the UI no longer (or never) knew: counts nothing
            continue
        for attempt in attempts:
            if attempt.get("status") == "SKIPPED":
                continue
            totals["shuffle_write_bytes"] += int(attempt.get("shuffleWriteBytes", 0))
            totals["shuffle_read_bytes"] += int(attempt.get("shuffleReadBytes", 0))
            totals["shuffle_write_records"] += int(attempt.get("shuffleWriteRecords", 0))
            totals["stages"] += 1
            for name, rest_name in STAGE_METRICS.items():
                totals[name] += int(attempt.get(rest_name, 0) or 0)
    return totals


def rest_time(text: str) -> float:
    """A REST API time (``2026-11-23T04:10:11.123GMT``) in seconds since the epoch."""
    return datetime.datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def stage_windows(spark: SparkSession, stages: List[int]) -> List[Dict[str, Any]]:
    """Each completed stage attempt of ``stages``: its wall-clock window (seconds since the epoch,
    from submission to completion as the REST API records them) and the shuffle bytes its tasks
    read, remote and in all."""
    out: List[Dict[str, Any]] = []
    for stage in stages:
        try:
            attempts = rest(spark, f"stages/{stage}?details=false")
        except Exception:  # a stage the UI no longer (or never) knew
            continue
        for a in attempts:
            if a.get("status") != "COMPLETE" or not a.get("submissionTime") or not a.get("completionTime"):
                continue
            out.append(
                {
                    "stage": stage,
                    "attempt": int(a.get("attemptId", 0)),
                    "name": str(a.get("name", ""))[:80],
                    "submitted": rest_time(a["submissionTime"]),
                    "completed": rest_time(a["completionTime"]),
                    "tasks": int(a.get("numCompleteTasks", 0) or 0),
                    "shuffle_read_bytes": int(a.get("shuffleReadBytes", 0) or 0),
                    "remote_bytes_read": int(a.get("shuffleRemoteBytesRead", 0) or 0),
                }
            )
    return out


# How long the driver's ContextCleaner gets to remove what the previous jobs left (see below).
CLEANUP_PAUSE_S = 2.0


def release_finished_jobs(spark: SparkSession, pause_s: float = CLEANUP_PAUSE_S) -> None:
    """Lets everything the previous jobs left behind go, the same way for every contender, before
    the next job is timed. Python's cyclic GC frees DataFrames that reference cycles still hold
    (each keeps its Java query execution alive, and through it any broadcast hash relation cached
    in the executors' memory); the driver's GC then lets Spark's ContextCleaner remove those
    broadcasts and the shuffles of dropped plans; the pause lets it finish. Without this, whether
    an earlier query's broadcasts still filled the executors' heaps depended on when Python
    happened to collect: on 24 November one contender's executors held 84 MB more live heap
    during TPC-H Q18 and spent three times as long in GC."""
    gc.collect()
    jvm_class(spark, "java.lang.System").gc()
    time.sleep(pause_s)


def timed(
    spark: SparkSession,
    group: str,
    job: Callable[[], Any],
    pause_s: float = CLEANUP_PAUSE_S,
    service_pid: Optional[int] = None,
) -> Dict[str, Any]:
    """Runs ``job`` in job group ``group``, after :func:`release_finished_jobs` (``pause_s``); its seconds,
    answer, Spark's shuffle metrics and the CPU seconds its executor processes used meanwhile
    (``executor_process_cpu_s``, see :func:`executor_cpu_seconds`; absent when no executor process
    was found on this machine), by kind of thread (``executor_cpu_by_thread``, see
    :func:`executor_thread_cpu`), and the driver's (``driver_process_cpu_s``): on a machine with few
    cores the driver's scheduling and metrics take CPU from the executors. With ``service_pid``
    (the node shuffle service's JVM, which serves the executors' outputs), that process's CPU
    seconds too (``service_process_cpu_s``, and by kind of thread, ``service_cpu_by_thread``): work
    the executors no longer do, on the same cores."""
    release_finished_jobs(spark, pause_s)
    spark.sparkContext.setJobGroup(group, group)
    app = spark.sparkContext.applicationId
    port = str(spark.sparkContext.getConf().get("spark.driver.port", ""))
    driver = driver_pid(spark)
    cpu_before = executor_cpu_seconds(app, driver_port=port)
    threads_before = executor_thread_cpu(app, driver_port=port)
    driver_before = process_cpu_seconds(driver)
    service_pids = [service_pid] if service_pid is not None else []
    service_before = process_thread_cpu(service_pids)
    started = time.monotonic()
    answer = job()
    seconds = time.monotonic() - started
    threads_after = executor_thread_cpu(app, driver_port=port)
    cpu_after = executor_cpu_seconds(app, driver_port=port)
    driver_after = process_cpu_seconds(driver)
    service_after = process_thread_cpu(service_pids)
    spark.sparkContext.setJobGroup("", "")
    out: Dict[str, Any] = {"seconds": round(seconds, 3), "answer": answer}
    out.update(shuffle_bytes(spark, stages_of_group(spark, group)))
    cpu = cpu_used(cpu_before, cpu_after)
    if cpu is not None:
        out["executor_process_cpu_s"] = round(cpu, 3)
        out["executor_processes"] = len(cpu_before)
        out["executor_cpu_by_thread"] = thread_cpu_used(threads_before, threads_after)
    out["driver_process_cpu_s"] = round(driver_after - driver_before, 3)
    if service_pids:
        out["service_process_cpu_s"] = round(service_after["total"] - service_before["total"], 3)
        out["service_cpu_by_thread"] = thread_cpu_used(service_before, service_after)
    return out


def driver_pid(spark: SparkSession) -> int:
    """The process id of the session's driver JVM (this machine's, as every benchmark runs it)."""
    return int(jvm_class(spark, "java.lang.ProcessHandle").current().pid())


# --- the executors' CPU from /proc ---------------------------------------------------------------

EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
# The benchmark's own 1 ms memory sampler (ExecutorProbe, started in Sluice's executors by
# `sluice bench memory` and `scale`): its CPU is the benchmark's, not the shuffle's.
PROBE_THREAD = "sluice-bench-me"  # its name as /proc shows it (15 characters)


def executor_pids(app_id: str, proc: str = "/proc", driver_port: str = "") -> List[int]:
    """The process ids of application ``app_id``'s executors running on this machine (their command
    lines name Spark's executor main class and ``--app-id APP``, and when ``driver_port`` is given a
    ``--driver-url`` on that port: each local-cluster master numbers its applications from 0, so two
    started in the same second on one machine share an id)."""
    found: List[int] = []
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/cmdline", "rb") as f:
                argv = f.read().decode("utf-8", "replace").split("\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if EXECUTOR_MAIN in argv and any(a == "--app-id" and b == app_id for a, b in zip(argv, argv[1:])):
            if driver_port and not any(
                a == "--driver-url" and b.endswith(f":{driver_port}") for a, b in zip(argv, argv[1:])
            ):
                continue
            found.append(int(entry))
    return sorted(found)


def stat_cpu_ticks(stat: str) -> int:
    """utime + stime (clock ticks) of a ``/proc/PID/stat`` or ``/proc/PID/task/TID/stat`` line; for a
    process, these include its threads that have ended."""
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


def process_cpu_seconds(pid: int, proc: str = "/proc") -> float:
    """The CPU seconds (user + system, every thread) process ``pid`` used so far, less the
    benchmark's own sampler thread's (:data:`PROBE_THREAD`)."""
    ticks = os.sysconf("SC_CLK_TCK")
    with open(f"{proc}/{pid}/stat") as f:
        total = stat_cpu_ticks(f.read())
    try:
        tasks = os.listdir(f"{proc}/{pid}/task")
    except OSError:
        tasks = []
    for tid in tasks:
        try:
            with open(f"{proc}/{pid}/task/{tid}/comm") as f:
                if f.read().strip() != PROBE_THREAD:
                    continue
            with open(f"{proc}/{pid}/task/{tid}/stat") as f:
                total -= stat_cpu_ticks(f.read())
        except OSError:
            continue
    return total / ticks


def executor_cpu_seconds(app_id: str, proc: str = "/proc", driver_port: str = "") -> Dict[int, float]:
    """:func:`process_cpu_seconds` of each of ``app_id``'s executors on this machine, by pid (see
    :func:`executor_pids` for ``driver_port``)."""
    out: Dict[int, float] = {}
    for pid in executor_pids(app_id, proc, driver_port):
        try:
            out[pid] = process_cpu_seconds(pid, proc)
        except (OSError, ValueError, IndexError):
            continue
    return out


# What each executor thread is, by the start of its name as /proc shows it (15 characters): the
# tasks, the JIT, the collector, Sluice's own threads, Spark's shuffle transport and its RPC.
THREAD_KINDS = (
    ("tasks", ("Executor task",)),
    ("jit", ("C1 CompilerThre", "C2 CompilerThre")),
    ("gc", ("GC Thread", "G1 ", "VM Thread")),
    ("sluice network", ("sluice-server", "sluice-client", "sluice-boss")),
    ("sluice reads", ("sluice-partitio",)),
    ("sluice metrics", ("sluice-metrics", "sluice-backpres")),
    ("sluice other", ("sluice-",)),
    ("spark shuffle", ("shuffle-server", "shuffle-client", "shuffle-boss")),
    ("spark rpc", ("rpc-", "dispatcher-", "netty-rpc", "executor-heart")),
)


def thread_kind(comm: str) -> str:
    """The kind (:data:`THREAD_KINDS`) of an executor thread named ``comm``; ``other`` if none."""
    for kind, prefixes in THREAD_KINDS:
        if comm.startswith(prefixes):
            return kind
    return "other"


def executor_thread_cpu(app_id: str, proc: str = "/proc", driver_port: str = "") -> Dict[str, float]:
    """The CPU seconds the live threads of ``app_id``'s executors used so far, by
    :func:`thread_kind`, and ``total`` (see :func:`process_thread_cpu`)."""
    return process_thread_cpu(executor_pids(app_id, proc, driver_port), proc)


def process_thread_cpu(pids: Iterable[int], proc: str = "/proc") -> Dict[str, float]:
    """The CPU seconds the live threads of processes ``pids`` used so far, by :func:`thread_kind`,
    and ``total`` (every thread, ended ones included: the difference of two samples' totals less
    their kinds' is what threads that ended in between used)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: Dict[str, float] = {"total": 0.0}
    for pid in pids:
        try:
            with open(f"{proc}/{pid}/stat") as f:
                out["total"] += stat_cpu_ticks(f.read()) / ticks
            tasks = os.listdir(f"{proc}/{pid}/task")
        except (OSError, ValueError, IndexError):
            continue
        for tid in tasks:
            try:
                with open(f"{proc}/{pid}/task/{tid}/comm") as f:
                    kind = thread_kind(f.read().strip())
                with open(f"{proc}/{pid}/task/{tid}/stat") as f:
                    out[kind] = out.get(kind, 0.0) + stat_cpu_ticks(f.read()) / ticks
            except (OSError, ValueError, IndexError):
                continue
    return out


def thread_cpu_used(before: Dict[str, float], after: Dict[str, float]) -> Dict[str, float]:
    """What each kind of thread used between two :func:`executor_thread_cpu` samples; ``ended``:
    threads that ended in between (a JIT compiler thread, a connector)."""
    used = {k: round(v - before.get(k, 0.0), 3) for k, v in after.items() if k != "total"}
    used["ended"] = round(after.get("total", 0.0) - before.get("total", 0.0) - sum(used.values()), 3)
    return {k: v for k, v in used.items() if abs(v) >= 0.001}


def cpu_used(before: Dict[int, float], after: Dict[int, float]) -> Optional[float]:
    """The CPU seconds the executors used between two :func:`executor_cpu_seconds` samples; None
    when there were none, or when an executor ended or started in between (its CPU is unknown)."""
    if not before or set(before) != set(after):
        return None
    return sum(after[pid] - before[pid] for pid in before)


def executor_probe(spark: SparkSession, reset: bool) -> List[Dict[str, Any]]:
    probe = jvm_class(spark, "org.apache.spark.shuffle.sluice.bench.ExecutorProbe")
    found: List[Dict[str, Any]] = json.loads(str(probe.collect(spark.sparkContext._jsc, reset, 20)))
    return found
