"""Runs one real-failure scenario (a straggler, a cancelled job, many shuffles, a stopped executor)
through Sluice in its own Spark application and writes what happened as JSON (answers, the
expected answers, Spark's stage attempts and task failure reasons, file descriptors). Run in its
own process:

    python tests/run_real_failures.py SCENARIO --out out.json [--master URL] [--local-dirs DIR]

Scenarios:
  speculation    one straggling reducer (its first attempt sleeps after its first record) with
                 speculation on: a speculative copy reads the same map outputs while the original
                 holds its channels, and the original is killed once the copy succeeds
  cancel         a job group cancelled with interrupts while its reducers read, then a second job
                 on the same materialised shuffle (its map stage skipped)
  many_shuffles  3 shuffles of 120 maps each kept referenced: open files of the executors, then
                 the references dropped and the driver's GC run until ContextCleaner unregisters
                 the shuffles and their partition files are deleted
  sigstop        one executor SIGSTOPped while the reduce stage reads from it, Spark's default
                 failure limits, a 20 s spark.network.timeout
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import threading
import time
from operator import add
from typing import Any, Callable, Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import realapps  # noqa: E402
import sessions  # noqa: E402
from pyspark import TaskContext  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

# --- speculation -----------------------------------------------------------------------------

SPECULATION_CONF = {
    "spark.speculation": "true",
    "spark.speculation.interval": "100ms",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.multiplier": "2",
    "spark.speculation.minTaskRuntime": "1s",
}
STRAGGLER_SLEEP_S = 45.0


def speculation(spark: SparkSession) -> Dict[str, Any]:
    sc = spark.sparkContext
    n, keys = 200_000, 1_000
    reduced = sc.parallelize(range(n), 8).map(lambda i: (i % keys, i)).reduceByKey(add, 8)

    def straggle(index: int, records: Any) -> Any:
        ctx = TaskContext.get()
        for i, record in enumerate(records):
            if i == 1 and ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
                time.sleep(STRAGGLER_SLEEP_S)  # the first attempt of partition 0 straggles mid-read
            yield record

    started = time.monotonic()
    got = sorted(reduced.mapPartitionsWithIndex(straggle).collect())
    seconds = time.monotonic() - started
    expected: Dict[int, int] = {}
    for i in range(n):
        expected[i % keys] = expected.get(i % keys, 0) + i
    return {
        "equal": got == sorted(expected.items()),
        "rows": len(got),
        "seconds": round(seconds, 2),
        "straggler_sleep_s": STRAGGLER_SLEEP_S,
        "executor_hosts": executor_hosts(spark),
    }


def executor_hosts(spark: SparkSession) -> List[str]:
    return sorted({e["hostPort"].rsplit(":", 1)[0] for e in sessions.rest(spark, "executors") if e["id"] != "driver"})


# --- cancel ----------------------------------------------------------------------------------


def cancel(spark: SparkSession) -> Dict[str, Any]:
    sc = spark.sparkContext
    n, keys = 400_000, 4_093
    shuffled = sc.parallelize(range(n), 8).map(lambda i: (i % keys, i)).partitionBy(4)

    def slow_sum(records: Any) -> Any:
        total = 0
        for i, (_k, v) in enumerate(records):
            if i % 500 == 0:
                # Reads slowly: ~50 s for a reducer's 100k records, so that the cancel, which comes
                # 2 s after two reducers are seen reading, finds them still reading even when a
                # loaded machine's status polling sees them late (a 10 s reducer once finished first).
                time.sleep(0.25)
            total += v
        yield total

    def fast_sum(records: Any) -> Any:
        yield sum(v for _k, v in records)

    outcome: Dict[str, Any] = {}

    def first_job() -> None:
        sc.setJobGroup("g", "slow reducers, cancelled while they read", interruptOnCancel=True)
        try:
            outcome["first"] = shuffled.mapPartitions(slow_sum).collect()
        except Exception as e:  # the cancellation, expected
            outcome["first_error"] = str(e)[:2000]

    from pyspark import InheritableThread

    thread = InheritableThread(target=first_job, daemon=True)
    thread.start()
    tracker = sc.statusTracker()

    def reduce_stage_reading() -> Any:
        stages = sessions.stages_of_group(spark, "g")
        if len(stages) < 2:
            return None
        info = tracker.getStageInfo(max(stages))
        return max(stages) if info is not None and info.numActiveTasks >= 2 else None

    reduce_stage = realapps.wait_for(reduce_stage_reading, timeout=180)
    if reduce_stage is not None:
        time.sleep(2.0)  # the reducers have opened their channels and are reading
        sc.cancelJobGroup("g")
    thread.join(timeout=180)
    first_stages = sessions.stages_of_group(spark, "g")

    sc.setJobGroup("g2", "the same shuffle read again")
    started = time.monotonic()
    got = sorted(shuffled.mapPartitions(fast_sum).collect())
    seconds = time.monotonic() - started
    jobs = [sessions.rest(spark, f"jobs/{j}") for j in tracker.getJobIdsForGroup("g2")]
    return {
        "cancelled_while_reading": reduce_stage is not None,
        "first_finished": "first" in outcome,
        "first_error": outcome.get("first_error", ""),
        "first_stages": first_stages,
        "second_stages": sessions.stages_of_group(spark, "g2"),
        "second_skipped_stages": sum(int(j.get("numSkippedStages", 0)) for j in jobs),
        "equal": sum(got) == n * (n - 1) // 2,
        "second_seconds": round(seconds, 2),
    }


# --- many shuffles ---------------------------------------------------------------------------

SHUFFLES, MAPS = 3, 120


def many_shuffles(spark: SparkSession, local_dirs: str, shuffles: int = SHUFFLES, maps: int = MAPS) -> Dict[str, Any]:
    sc = spark.sparkContext
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    frames = []
    answers = []
    for _ in range(shuffles):
        df = spark.range(0, maps * 10, 1, maps).groupBy((F.col("id") % 7).alias("k")).agg(F.sum("id").alias("s"))
        answers.append(sorted(tuple(r) for r in df.collect()))
        frames.append(df)
    expected = sorted((k, sum(x for x in range(maps * 10) if x % 7 == k)) for k in range(7))
    pids = sessions.own_executor_pids(spark)
    files_before = len(realapps.partition_files(local_dirs))

    def no_partition_file_open() -> bool:
        return not any("sluice-shuffle-" in f for pid in pids for f in realapps.open_files(pid))

    # The last reducers' channels close after their task ends, and the servers close the files they
    # kept open for readers about a second after the last reader came: wait for both, bounded.
    idle_started = time.monotonic()
    realapps.wait_for(no_partition_file_open, timeout=15, interval=0.25)
    fds = {str(pid): realapps.open_files(pid) for pid in pids}
    out: Dict[str, Any] = {
        "equal": all(a == expected for a in answers),
        "executor_pids": pids,
        "shuffles": shuffles,
        "maps": maps,
        "partition_files_while_referenced": files_before,
        "open_partition_files": {pid: sum(1 for f in names if "sluice-shuffle-" in f) for pid, names in fds.items()},
        "open_fds": {pid: len(names) for pid, names in fds.items()},
        "seconds_until_files_closed": round(time.monotonic() - idle_started, 1),
    }
    # Drop every reference: ContextCleaner then unregisters each shuffle on the executors.
    del frames, df
    gc.collect()

    def all_deleted() -> bool:
        sc._jvm.System.gc()
        return not realapps.partition_files(local_dirs)

    started = time.monotonic()
    out["deleted_after_gc"] = bool(realapps.wait_for(all_deleted, timeout=180, interval=2.0))
    out["seconds_to_delete"] = round(time.monotonic() - started, 1)
    out["partition_files_left"] = len(realapps.partition_files(local_dirs))
    out["open_fds_after_gc"] = {str(pid): len(realapps.open_files(pid)) for pid in pids}
    return out


# --- sigstop ---------------------------------------------------------------------------------

SIGSTOP_CONF = {
    "spark.network.timeout": "20s",
    "spark.network.timeoutInterval": "5s",
    "spark.executor.heartbeatInterval": "2s",
}


def sigstop(spark: SparkSession) -> Dict[str, Any]:
    n, keys = 400_000, 1_000
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    # 64 hex characters a row, which compress poorly: a reducer's input from the other executor is
    # several MB, far more than its credit window, so it is still reading from it when it stops.
    rows = spark.range(0, n, 1, 8).select(
        ((F.col("id") * 7919) % keys).alias("k"), F.col("id"), F.sha2(F.col("id").cast("string"), 256).alias("pad")
    )
    # A 3 ms pause every 50 rows, in the JVM, as the reduce tasks pull their input: spread over 20
    # keys, so every reducer reads slowly, for about 6 s.
    pause = F.when(F.col("id") % 50 == 0, F.expr("reflect('java.lang.Thread', 'sleep', cast(id * 0 + 3 as bigint))"))
    slow = rows.repartition(4, "k").select(
        "k", (F.col("id") + F.coalesce(F.length(pause), F.lit(0)) * 0).alias("id"), "pad"
    )
    summed = slow.groupBy("k").agg(F.sum("id").alias("s"), F.sum(F.length("pad")).alias("p"))
    state: Dict[str, Any] = {}
    app_id = spark.sparkContext.applicationId
    driver_port = str(spark.sparkContext.getConf().get("spark.driver.port"))
    tracker = spark.sparkContext.statusTracker()

    def stopper() -> None:
        def reduce_running() -> bool:
            info = tracker.getStageInfo(1)  # stage 1 reads the shuffle stage 0 wrote
            return info is not None and info.numActiveTasks > 0

        if realapps.wait_for(reduce_running, timeout=180):
            time.sleep(1.0)  # the reducers have opened their channels
            pids = sessions.executor_pids(app_id, driver_port=driver_port)
            if pids:
                os.kill(pids[0], signal.SIGSTOP)
                state["stopped"] = pids[0]
                with open(f"/proc/{pids[0]}/cmdline", "rb") as f:
                    args = f.read().decode("utf-8", "replace").split("\0")
                state["stopped_executor"] = args[args.index("--executor-id") + 1] if "--executor-id" in args else None
                state["stopped_at"] = time.monotonic()
                state["stopped_clock"] = time.strftime("%H:%M:%S", time.gmtime())

    thread = threading.Thread(target=stopper, daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        got = sorted((r["k"], r["s"], r["p"]) for r in summed.collect())
    finally:
        thread.join(timeout=5)
        stopped = state.get("stopped")
        if stopped:  # nothing stays behind: wake the process and kill it
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(stopped, sig)
                except ProcessLookupError:
                    pass
    expected: Dict[int, Tuple[int, int]] = {}
    for i in range(n):
        s, p = expected.get((i * 7919) % keys, (0, 0))
        expected[(i * 7919) % keys] = (s + i, p + 64)
    return {
        "stopped": state.get("stopped"),
        "stopped_executor": state.get("stopped_executor"),
        "stopped_clock": state.get("stopped_clock"),
        "equal": got == sorted((k, s, p) for k, (s, p) in expected.items()),
        "seconds": round(time.monotonic() - started, 1),
        "seconds_after_stop": round(time.monotonic() - state.get("stopped_at", started), 1),
    }


SCENARIOS: Dict[str, Callable[..., Dict[str, Any]]] = {
    "speculation": speculation,
    "cancel": cancel,
    "many_shuffles": many_shuffles,
    "sigstop": sigstop,
}
CONF: Dict[str, Dict[str, str]] = {"speculation": SPECULATION_CONF, "sigstop": SIGSTOP_CONF}


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=list(SCENARIOS))
    parser.add_argument("--out", required=True)
    parser.add_argument("--master", help="default: local-cluster[2,2,2048] (SLUICE_REAL_MASTER)")
    parser.add_argument("--standalone", help="start a standalone cluster of two hosts, logs in this directory")
    parser.add_argument("--conf", action="append", default=[], help="a Spark setting, key=value")
    parser.add_argument("--shuffles", type=int, default=SHUFFLES, help="many_shuffles: how many")
    parser.add_argument("--maps", type=int, default=MAPS, help="many_shuffles: map tasks of each")
    args = parser.parse_args(argv)
    if args.master:
        os.environ["SLUICE_REAL_MASTER"] = args.master
    conf = dict(CONF.get(args.scenario, {}), **dict(c.split("=", 1) for c in args.conf))
    if args.standalone:
        conf.update({"spark.cores.max": "4", "spark.executor.cores": "2", "spark.executor.memory": "1g"})
        with realapps.StandaloneCluster(args.standalone) as master:
            os.environ["SLUICE_REAL_MASTER"] = master
            return run(args, conf)
    return run(args, conf)


def run(args: argparse.Namespace, conf: Dict[str, str]) -> int:
    result: Dict[str, Any] = {"scenario": args.scenario}
    with realapps.build_session("sluice", args.scenario, {}, conf) as spark:
        if args.scenario == "many_shuffles":
            result.update(
                many_shuffles(spark, os.environ.get("SPARK_LOCAL_DIRS", "/nonexistent"), args.shuffles, args.maps)
            )
        else:
            result.update(SCENARIOS[args.scenario](spark))
        result["stages"] = realapps.stage_attempts(spark)
    sessions.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
