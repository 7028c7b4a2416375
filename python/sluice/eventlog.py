"""What one application's Spark event log says about its jobs: wall time, executor CPU, shuffle
bytes and fetch wait, per job and in total, as plain values (``sluice compare`` reads it).

Spark writes one JSON object per line (``spark.eventLog.compress=false``): the application's
start and end, each job's start (with its stages) and end, and each task's end with its metrics.
A task counts for the first job that ran its stage. Both of Spark's layouts are read: one file per
application, and the rolling one (``spark.eventLog.rolling.enabled``, Spark 4's default), a
directory ``eventlog_v2_<app>`` of ``events_<n>_<app>`` files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

# The figures read per job and for the application, with how they are shown.
FIGURES = ("wall_s", "executor_cpu_s", "shuffle_bytes", "fetch_wait_s")


@dataclass
class Figures:
    """Wall time (s), Spark's executor CPU time of the tasks (s), shuffle bytes written, and the
    reduce tasks' fetch wait (s)."""

    wall_s: float = 0.0
    executor_cpu_s: float = 0.0
    shuffle_bytes: int = 0
    fetch_wait_s: float = 0.0

    def get(self, name: str) -> float:
        return float(getattr(self, name))


@dataclass
class Job:
    """One job of the application: its id, a name (its result stage's, e.g. ``count at app.py:12``)."""

    job_id: int
    name: str
    figures: Figures = field(default_factory=Figures)
    succeeded: bool = False


@dataclass
class Application:
    """An application's jobs (in job id order) and its totals; ``app_id`` as Spark named it."""

    app_id: str
    jobs: List[Job]
    total: Figures


class EventLogError(Exception):
    """An event log that is missing, empty or not one of a finished application."""


def read(path: Path) -> Application:
    """The jobs and totals of the application whose (uncompressed) event log is ``path``.

    Raises:
        EventLogError: when the file cannot be read or holds no finished application.
    """
    try:
        lines = [line for part in _parts(path) for line in part.read_text(encoding="utf-8").splitlines()]
    except OSError as e:
        raise EventLogError(f"cannot read the event log {path}: {e}") from None
    app_id = ""
    started: Optional[int] = None
    ended: Optional[int] = None
    jobs: Dict[int, Job] = {}
    job_start: Dict[int, int] = {}
    job_of_stage: Dict[int, int] = {}
    total = Figures()
    for line in lines:
        if not line.strip():
            continue
        event: Dict[str, Any] = json.loads(line)
        kind = event.get("Event")
        if kind == "SparkListenerApplicationStart":
            app_id = str(event.get("App ID", ""))
            started = int(event["Timestamp"])
        elif kind == "SparkListenerApplicationEnd":
            ended = int(event["Timestamp"])
        elif kind == "SparkListenerJobStart":
            job_id = int(event["Job ID"])
            infos = event.get("Stage Infos") or []
            result = max(infos, key=lambda i: int(i["Stage ID"]), default=None)
            jobs[job_id] = Job(job_id, str(result.get("Stage Name", "")) if result else "")
            job_start[job_id] = int(event.get("Submission Time", 0))
            for stage in event.get("Stage IDs") or []:
                job_of_stage.setdefault(int(stage), job_id)
        elif kind == "SparkListenerJobEnd":
            job = jobs.get(int(event["Job ID"]))
            if job is not None:
                job.figures.wall_s = (int(event.get("Completion Time", 0)) - job_start[job.job_id]) / 1000.0
                job.succeeded = (event.get("Job Result") or {}).get("Result") == "JobSucceeded"
        elif kind == "SparkListenerTaskEnd":
            metrics = event.get("Task Metrics") or {}
            owner = jobs.get(job_of_stage.get(int(event.get("Stage ID", -1)), -1))
            for figures in ([owner.figures] if owner else []) + [total]:
                figures.executor_cpu_s += int(metrics.get("Executor CPU Time", 0)) / 1e9
                figures.shuffle_bytes += int(
                    (metrics.get("Shuffle Write Metrics") or {}).get("Shuffle Bytes Written", 0)
                )
                figures.fetch_wait_s += (
                    int((metrics.get("Shuffle Read Metrics") or {}).get("Fetch Wait Time", 0)) / 1000.0
                )
    if started is None or ended is None:
        raise EventLogError(f"{path} holds no finished application (no application start and end)")
    total.wall_s = (ended - started) / 1000.0
    return Application(app_id, [jobs[j] for j in sorted(jobs)], total)


def _parts(path: Path) -> List[Path]:
    """The files of an event log: itself, or a rolling log's ``events_<n>_...`` files in order."""
    if not path.is_dir():
        return [path]
    parts = [p for p in path.iterdir() if p.name.startswith("events_")]
    return sorted(parts, key=lambda p: int(p.name.split("_")[1]))


def _finished(path: Path) -> bool:
    if path.is_dir():  # a rolling log is finished once its status file lost ".inprogress"
        return not any(p.name.startswith("appstatus_") and p.name.endswith(".inprogress") for p in path.iterdir())
    return not path.name.endswith(".inprogress")


def find(directory: Path) -> Path:
    """The one finished event log Spark wrote into ``directory`` (a file, or a rolling log's directory).

    Raises:
        EventLogError: when there is none (or one still in progress) or more than one.
    """
    logs = [p for p in directory.iterdir() if not p.name.startswith(".")] if directory.is_dir() else []
    finished = [p for p in logs if _finished(p)]
    if len(finished) != 1:
        what = ", ".join(p.name for p in logs) or "nothing"
        raise EventLogError(f"expected one finished event log in {directory}, found {what}")
    return finished[0]
