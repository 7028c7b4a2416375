"""The short queries of ``sluice bench batch --short``, inside one contender's application: TPC-H
at a small scale factor and single small shuffles, each timed with a breakdown of where its time
went. Both contenders' applications run at the same time and take turns job by job
(:class:`Turns`), so a load that changes during the run (a shared machine) weighs on both alike.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Dict, List

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sluice_bench.compare import plain_rows
from sluice_bench.jobs import register_tpch, run_query
from sluice_bench.session import stage_windows, stages_of_group, timed
from sluice_bench.short import SHUFFLES

# The pause before each timed job that lets the previous jobs' broadcasts and shuffles go
# (session.release_finished_jobs): shorter than the long benchmarks', for many short jobs.
PAUSE_S = 0.5
# --cold: after its executors registered, how long an application lets their start-up finish.
SETTLE_S = 3.0


def small_shuffles(spark: SparkSession) -> Dict[str, Callable[[], List[List[Any]]]]:
    """Single small shuffles: a repartition of 1,000 rows into 8 partitions (then counted), and a
    group-by of 100,000 rows into 100 groups."""

    def repartition() -> List[List[Any]]:
        return [[spark.range(0, 1000, 1, 4).repartition(8).count()]]

    def group_by() -> List[List[Any]]:
        df = spark.range(0, 100_000, 1, 8).select((F.col("id") % 100).alias("k"))
        return plain_rows([list(r) for r in df.groupBy("k").count().collect()])

    return dict(zip(SHUFFLES, (repartition, group_by)))


class Turns:
    """Job-by-job turns between applications that run at the same time, through marker files in a
    directory both can see: ``order`` lists (contender, job) items, and an application runs its
    items in that order, each once the item before it (whoever ran it) is done."""

    def __init__(self, directory: str, order: List[List[str]], me: str, timeout_s: float) -> None:
        self.directory = Path(directory)
        self.order = order
        self.me = me
        self.timeout_s = timeout_s

    def _marker(self, name: str) -> Path:
        return self.directory / name

    def _await(self, name: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not self._marker(name).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.me}: waited {self.timeout_s:.0f}s for {name} in {self.directory}")
            time.sleep(0.01)

    def ready(self) -> None:
        """This application is warmed up; returns once every contender of ``order`` is."""
        self._marker(f"ready-{self.me}").touch()
        for contender in sorted({c for c, _ in self.order}):
            self._await(f"ready-{contender}")

    def run(self, job: Callable[[int, str], None]) -> None:
        """Calls ``job(index, name)`` for each of this application's items, in turn."""
        for index, (contender, name) in enumerate(self.order):
            if contender != self.me:
                continue
            if index > 0:
                self._await(f"done-{index - 1}")
            try:
                job(index, name)
            finally:
                self._marker(f"done-{index}").touch()


def breakdown(spark: SparkSession, group: str, run: Dict[str, Any]) -> Dict[str, Any]:
    """Where a timed job's wall-clock time went: ``in_stages_s``, the time some stage of the job was
    running (the union of its stages' windows), and ``outside_stages_s``, the rest (planning,
    the driver between stages, collecting the answer)."""
    windows = sorted((w["submitted"], w["completed"]) for w in stage_windows(spark, stages_of_group(spark, group)))
    busy, end = 0.0, float("-inf")
    for start, stop in windows:
        if stop > end:
            busy += stop - max(start, end)
            end = stop
    return {"in_stages_s": round(busy, 3), "outside_stages_s": round(max(0.0, float(run["seconds"]) - busy), 3)}


def measured(spark: SparkSession, group: str, name: str, job: Callable[[], List[List[Any]]]) -> Dict[str, Any]:
    """Job ``name`` timed in job group ``group`` (:func:`timed`), with its :func:`breakdown`."""
    run = timed(spark, group, job, pause_s=PAUSE_S)
    run.update(breakdown(spark, group, run), job=name)
    return run


def short_jobs(spark: SparkSession, spec: Dict[str, Any]) -> Dict[str, Callable[[], List[List[Any]]]]:
    """The small shuffles (``shuffles``) and the TPC-H queries of ``spec["tpch"]``, by name."""
    jobs: Dict[str, Callable[[], List[List[Any]]]] = {}
    if spec.get("shuffles", True):
        jobs.update(small_shuffles(spark))
    query_spec = spec.get("tpch")
    if query_spec is not None:
        register_tpch(spark, query_spec["data_dir"])
        for number in query_spec["queries"]:
            jobs[f"q{number}"] = (lambda n: lambda: run_query(spark, n))(int(number))
    return jobs


def await_executors(spark: SparkSession, count: int, timeout_s: float = 300.0) -> None:
    """Returns once ``count`` executors have registered, and their start-up (Sluice's network stack
    with its plugin) has had :data:`SETTLE_S` to finish; TimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    context = spark.sparkContext._jsc.sc()
    while context.getExecutorIds().size() < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} executors did not register within {timeout_s:.0f}s")
        time.sleep(0.05)
    time.sleep(SETTLE_S)


def run_cold(spark: SparkSession, contender: str, spec: Dict[str, Any]) -> Dict[str, Any]:
    """``sluice bench batch --short --cold``: this fresh application's first jobs, each once and in
    order (the small shuffles, then the queries), timed from the moment its ``executors`` are up."""
    await_executors(spark, int(spec["executors"]))
    jobs = short_jobs(spark, spec)
    runs = [measured(spark, f"cold-{index}", name, jobs[name]) for index, name in enumerate(jobs)]
    return {"contender": contender, "runs": runs}


def run_short(spark: SparkSession, contender: str, spec: Dict[str, Any]) -> Dict[str, Any]:
    """``spec``: ``tpch`` ({data_dir, queries} or null), ``shuffles`` (bool), ``turns`` ({dir,
    order, timeout_s}). The small shuffles and the first query run once unmeasured, then this
    application's turns of ``order``; each result carries its round (the job's name is ``NAME#ROUND``)."""
    jobs = short_jobs(spark, spec)
    # Warm-up, unmeasured and the same for both: the small shuffles and the first query.
    for name in [*SHUFFLES, *[j for j in jobs if j.startswith("q")][:1]]:
        if name in jobs:
            jobs[name]()
    turns_spec = spec["turns"]
    turns = Turns(turns_spec["dir"], turns_spec["order"], contender, float(turns_spec["timeout_s"]))
    turns.ready()
    runs: List[Dict[str, Any]] = []

    def one(index: int, item: str) -> None:
        name, round_number = item.split("#")
        group = f"short-{index}"
        run = measured(spark, group, name, jobs[name])
        run["round"] = int(round_number)
        runs.append(run)

    turns.run(one)
    return {"contender": contender, "runs": runs}
