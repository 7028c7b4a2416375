"""How the tests start Spark applications and look into them: one way to build a session (on
Sluice, on Spark's sort shuffle as the reference, or as spark-submit configured it), the
environment an application's process runs in, and the driver's REST API and UI.

Used by conftest.py (the shared in-process session), by the runner scripts a test starts in a
process of their own (``run_*.py``: a Python process starts Spark's driver JVM only once) and by
the tests themselves. The benchmarks have their own (``sluice_bench.session``), which tests never
import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parent.parent
# Test-only JVM classes (SlowConsumerJob, ...): `run_gradle testJar` (dev/test does) builds them.
TEST_JAR = REPO / "build" / "test-libs" / "sluice-tests.jar"
# The shared in-process session (conftest's ``spark`` fixture): two executor JVMs with two cores
# each, so that remote channels run between them and the four concurrent tasks (2 map + 2 reduce)
# of a Real-Time Mode query with two shuffle partitions fit.
SESSION_MASTER = os.environ.get("SLUICE_TEST_CLUSTER_MASTER", "local-cluster[2,2,1024]")
# The applications the runner scripts start, one executor core each.
APP_MASTER = os.environ.get("SLUICE_TEST_MASTER", "local-cluster[2,1,1024]")
SHUFFLES = ("sluice", "sort", "preconfigured")


def app_env(**extra: str) -> Dict[str, str]:
    """The environment for a process that runs a Spark application: this one's, on loopback
    (``SPARK_LOCAL_IP``, unless ``extra`` names another address), always with pyspark's own Spark
    (the one Sluice was built for: no ``SPARK_HOME``), and ``extra``."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    env.pop("SPARK_HOME", None)
    env.update(extra)
    return env


def run_runner(script: str, args: Sequence[str], work: Path, timeout: float = 600) -> Tuple[Dict[str, Any], str]:
    """Runs the runner ``script`` (in tests/) with ``args`` in a process of its own, its result in
    and Spark's local dirs under ``work`` (a test's ``tmp_path``); fails the test with the runner's
    stderr unless it exits 0. Returns its JSON result and its stderr."""
    out = work / "result.json"
    local_dirs = work / "local"
    local_dirs.mkdir(exist_ok=True)
    proc = subprocess.run(
        [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), script), *args, "--out", str(out)],
        env=app_env(SPARK_LOCAL_DIRS=str(local_dirs)),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    with open(out) as f:
        result: Dict[str, Any] = json.load(f)
    return result, proc.stderr


def use_app_env() -> None:
    """Sets up this process as :func:`app_env` does, before it starts a Spark application."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ.pop("SPARK_HOME", None)


def build_session(
    app: str,
    shuffle: str,
    master: Optional[str],
    *,
    options: Optional[Mapping[str, object]] = None,
    conf: Optional[Mapping[str, str]] = None,
    jars: Sequence[str] = (),
    prometheus: bool = False,
    log_level: Optional[str] = None,
) -> SparkSession:
    """Starts the application ``app`` on ``master`` (None: the one spark-submit chose).

    ``shuffle`` is ``sluice`` (``sluice.configure`` with ``options`` and ``prometheus``, and
    nothing else of Sluice's), ``sort`` (Spark's sort shuffle, the reference) or ``preconfigured``
    (only what spark-submit set). ``conf`` are plain Spark settings; ``jars`` go on ``spark.jars``
    (Sluice adds its own jar after them); ``log_level`` sets the driver's log level.
    """
    if shuffle not in SHUFFLES:
        raise ValueError(f"unknown shuffle {shuffle!r}: one of {', '.join(SHUFFLES)}")
    use_app_env()
    builder = SparkSession.builder.appName(app).config("spark.ui.showConsoleProgress", "false")
    if master is not None:
        builder = builder.master(master)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    if shuffle == "sluice":
        import sluice

        builder = sluice.configure(builder, prometheus=prometheus, **(options or {}))
    elif shuffle == "sort":
        builder = builder.config("spark.shuffle.manager", "sort")
    spark = builder.getOrCreate()
    if log_level is not None:
        spark.sparkContext.setLogLevel(log_level)
    return spark


def write_json(path: str, value: Any) -> None:
    """What a runner script reports to the test that started it."""
    with open(path, "w") as f:
        json.dump(value, f)


def stages_of_group(spark: SparkSession, group: str) -> List[int]:
    """The ids of every stage of every job of job group ``group`` (skipped ones included)."""
    tracker = spark.sparkContext.statusTracker()
    stages = set()
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        if info is not None:
            stages.update(info.stageIds)
    return sorted(stages)


def executor_pids(
    app_id: str, backend: str = "org.apache.spark.executor.CoarseGrainedExecutorBackend", driver_port: str = ""
) -> List[int]:
    """The pids of this application's executor JVMs: processes whose command line (read whole from
    /proc, never cut to a terminal's width) runs ``backend`` (standalone's CoarseGrainedExecutorBackend;
    YARN's containers run YarnCoarseGrainedExecutorBackend) with ``--app-id`` ``app_id`` and, when
    ``driver_port`` is given, a ``--driver-url`` on that port. Each local-cluster master numbers its
    applications from 0, so two applications started in the same second on this machine have the
    same id: tests that run beside others pass their driver's port (:func:`own_executor_pids`)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().decode("utf-8", "replace").split("\0")
        except OSError:  # the process ended meanwhile
            continue
        if backend in args and app_id in args:
            if driver_port and not any(a.startswith("spark://") and a.endswith(f":{driver_port}") for a in args):
                continue
            pids.append(int(entry))
    return sorted(pids)


def own_executor_pids(spark: Any) -> List[int]:
    """:func:`executor_pids` of ``spark``'s application, told apart from any other on this machine
    by its driver's port."""
    sc = spark.sparkContext
    return executor_pids(sc.applicationId, driver_port=str(sc.getConf().get("spark.driver.port")))


def ui_url(spark: Any) -> str:
    url = spark.sparkContext.uiWebUrl
    assert url, "the Spark UI is not running"
    return str(url)


def http_get(url: str, timeout: float = 120.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
        return body.decode("utf-8")


def http_json(url: str, timeout: float = 120.0) -> Any:
    return json.loads(http_get(url, timeout))


def rest(spark: SparkSession, path: str) -> Any:
    """GET ``/api/v1/applications/<app>/<path>`` of the driver's UI."""
    return http_json(f"{ui_url(spark)}/api/v1/applications/{spark.sparkContext.applicationId}/{path}", timeout=60)
