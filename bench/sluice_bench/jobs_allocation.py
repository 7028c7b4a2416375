"""``sluice bench allocation``'s application (see ``worker``): a bursty job under dynamic allocation,
many short map tasks and then a few long reduce tasks, and what its executors cost: the seconds
each executor lived while the job ran (Spark's REST API: executors' add and remove times, the
job's submission and completion), and how long each released executor had been idle."""

from __future__ import annotations

import time
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from pyspark.sql import SparkSession

from sluice_bench.session import rest, rest_time

KEYS = 1_000


def bursty_job(spark: SparkSession, maps: int, rows_per_map: int, reducers: int, reduce_seconds: float) -> List[Any]:
    """``maps`` map tasks of ``rows_per_map`` (key, value) rows each, shuffled into ``reducers``
    partitions whose tasks read their input at a pace that makes each last ``reduce_seconds``
    (at least): a wide burst, then a narrow, long stage that still reads the map outputs. The
    answer: per reduce partition, its rows and the sum of their values."""
    expected_rows = maps * rows_per_map / reducers

    def rows(m: int) -> Iterator[Tuple[int, int]]:
        for i in range(rows_per_map):
            v = m * rows_per_map + i
            yield (v * 7919) % KEYS, v

    def paced_sums(index: int, pairs: Iterable[Tuple[int, int]]) -> Iterator[List[int]]:
        started = time.monotonic()
        count = total = 0
        step = max(1, int(expected_rows) // 100)
        for _, v in pairs:
            count += 1
            total += v
            if count % step == 0:  # no faster than the pace: the last rows arrive near the end
                ahead = count / expected_rows * reduce_seconds - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
        left = reduce_seconds - (time.monotonic() - started)
        if left > 0:
            time.sleep(left)
        yield [index, count, total]

    pairs = spark.sparkContext.parallelize(range(maps), maps).flatMap(rows)
    return sorted(pairs.partitionBy(reducers).mapPartitionsWithIndex(paced_sums).collect())


def _time(text: Optional[str]) -> Optional[float]:
    return rest_time(text) if text else None


def executor_seconds(executors: List[Dict[str, Any]], start: float, end: float) -> Tuple[float, List[Dict[str, Any]]]:
    """The seconds executors lived within [``start``, ``end``] (REST ``allexecutors`` entries,
    the driver left out), summed, and each executor's add and remove times relative to ``start``."""
    total = 0.0
    lives: List[Dict[str, Any]] = []
    for e in executors:
        if e.get("id") == "driver" or not e.get("addTime"):
            continue
        added = rest_time(e["addTime"])
        removed = _time(e.get("removeTime"))
        held = max(0.0, min(end, removed if removed is not None else end) - max(start, added))
        total += held
        lives.append(
            {
                "id": str(e["id"]),
                "host": str(e.get("hostPort", "")).rsplit(":", 1)[0],
                "added_s": round(added - start, 3),
                "removed_s": None if removed is None else round(removed - start, 3),
                "seconds_in_job": round(held, 3),
                "remove_reason": e.get("removeReason"),
            }
        )
    return total, sorted(lives, key=lambda x: x["added_s"])


# A stage attempt as Spark's REST API gives it, with its tasks that launched.
StageAttempt = Tuple[Dict[str, Any], List[Dict[str, Any]]]


def stage_attempts(spark: SparkSession, stages: List[int]) -> Dict[int, List[StageAttempt]]:
    """Each of ``stages``' attempts (REST ``stages/N``) and its launched tasks (``taskList``),
    fetched once for everything below that reads them."""
    return {
        stage: [
            (
                attempt,
                [
                    t
                    for t in rest(spark, f"stages/{stage}/{attempt['attemptId']}/taskList?length=100000")
                    if t.get("launchTime")
                ],
            )
            for attempt in rest(spark, f"stages/{stage}?details=false")
        ]
        for stage in stages
    }


def _duration_s(task: Dict[str, Any]) -> float:
    return float(task.get("duration", 0) or 0) / 1000


def last_task_ends(attempts: Dict[int, List[StageAttempt]]) -> Dict[str, float]:
    """When each executor's last task of the stages ended (seconds since the epoch)."""
    ends: Dict[str, float] = {}
    for per_stage in attempts.values():
        for _, tasks in per_stage:
            for t in tasks:
                executor = str(t.get("executorId"))
                ends[executor] = max(ends.get(executor, 0.0), rest_time(t["launchTime"]) + _duration_s(t))
    return ends


def stage_timeline(stage: int, attempts: List[StageAttempt], start: float) -> Dict[str, Any]:
    """Where stage ``stage``'s time went (seconds since ``start``): when it was submitted and
    completed, and per executor its tasks, its first task's launch and duration, the seconds its
    tasks took in all and ran (``executorRunTime``: a task's duration less its deserialisation and
    Spark's overheads), so that a stage that ends later shows whether executors took their first
    task later or ran their tasks longer."""
    timeline: Dict[str, Any] = {"stage": stage, "per_executor": {}}
    for attempt, tasks in attempts:
        if attempt.get("submissionTime"):
            timeline["submitted_s"] = round(rest_time(attempt["submissionTime"]) - start, 3)
        if attempt.get("completionTime"):
            timeline["completed_s"] = round(rest_time(attempt["completionTime"]) - start, 3)
        for t in sorted(tasks, key=lambda t: rest_time(t["launchTime"])):
            duration = _duration_s(t)
            e = timeline["per_executor"].setdefault(
                str(t.get("executorId")),
                {
                    "tasks": 0,
                    "first_launch_s": round(rest_time(t["launchTime"]) - start, 3),
                    "first_task_s": round(duration, 3),
                    "busy_s": 0.0,
                    "run_s": 0.0,
                },
            )
            e["tasks"] += 1
            e["busy_s"] += duration
            e["run_s"] += float((t.get("taskMetrics") or {}).get("executorRunTime", 0) or 0) / 1000
    for e in timeline["per_executor"].values():
        e["busy_s"], e["run_s"] = round(e["busy_s"], 3), round(e["run_s"], 3)
    return timeline


def idle_since(life: Dict[str, Any], start: float, ends: Dict[str, float]) -> float:
    """Since when an executor (``executor_seconds``'s entry) was idle: its last task's end, or
    when it was added if it ran none of the job's tasks (seconds since the epoch)."""
    return max(start + float(life["added_s"]), ends.get(str(life["id"]), 0.0))


def live_counts(lives: List[Dict[str, Any]], end: float) -> List[List[float]]:
    """The number of live executors over the job, as steps [seconds since its start, count]."""
    events: List[Tuple[float, int]] = []
    for life in lives:
        events.append((max(0.0, float(life["added_s"])), 1))
        removed = life["removed_s"]
        if removed is not None and removed < end:
            events.append((max(0.0, float(removed)), -1))
    live = 0
    steps: List[List[float]] = [[0.0, 0]]
    for t, change in sorted(events):
        live += change
        steps.append([round(t, 3), live])
    steps.append([round(end, 3), live])
    return steps


def run_allocation(spark: SparkSession, contender: str, spec: Dict[str, Any]) -> Dict[str, Any]:
    """``spec``: ``job`` ({maps, rows_per_map, reducers, reduce_seconds}). No warm-up: the
    executors' start is part of what dynamic allocation costs, the same for every contender."""
    job = spec["job"]
    sc = spark.sparkContext
    sc.setJobGroup("bursty", "bursty")
    started = time.monotonic()
    answer = bursty_job(
        spark, int(job["maps"]), int(job["rows_per_map"]), int(job["reducers"]), float(job["reduce_seconds"])
    )
    seconds = time.monotonic() - started
    sc.setJobGroup("", "")
    (job_id,) = sc.statusTracker().getJobIdsForGroup("bursty")
    info = rest(spark, f"jobs/{job_id}")
    submitted, completed = rest_time(info["submissionTime"]), rest_time(info["completionTime"])
    total, lives = executor_seconds(rest(spark, "allexecutors"), submitted, completed)
    attempts = stage_attempts(spark, sorted(info["stageIds"]))
    ends = last_task_ends(attempts)
    window = completed - submitted
    released = [
        {"id": life["id"], "idle_s": round(submitted + life["removed_s"] - idle_since(life, submitted, ends), 3)}
        for life in lives
        if life["removed_s"] is not None and 0 <= life["removed_s"] <= window
    ]
    return {
        "contender": contender,
        "answer": answer,
        "seconds": round(seconds, 3),
        "job_seconds": round(window, 3),
        "executor_seconds": round(total, 3),
        "executors": lives,
        "peak_executors": max((int(c) for _, c in live_counts(lives, window)), default=0),
        "live_at_end": sum(1 for life in lives if life["removed_s"] is None or life["removed_s"] >= window),
        "released_during_job": released,
        "live_counts": live_counts(lives, window),
        "stages": sorted(info["stageIds"]),
        "stage_timelines": [stage_timeline(stage, a, submitted) for stage, a in attempts.items()],
        "failed_tasks": int(info.get("numFailedTasks", 0)),
    }
