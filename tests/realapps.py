"""What the real-shape applications (``run_real_shapes.py``, ``run_real_failures.py``) share: the
session on ``local-cluster[2,2,2048]`` (two task slots per executor, AQE off), the executors'
open files, and Spark's own record of what went wrong (REST API stage attempts and task failure
reasons), so a test can tell a FetchFailed from a timeout and a retried stage from a skipped one.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import traceback
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import sessions
from pyspark import cloudpickle
from pyspark.sql import SparkSession

MASTER = "local-cluster[2,2,2048]"


def build_session(shuffle: str, app: str, options: Dict[str, str], conf: Dict[str, str]) -> SparkSession:
    """A session on ``SLUICE_REAL_MASTER`` (default ``local-cluster[2,2,2048]``) with AQE off:
    ``shuffle`` is ``sort`` (Spark's sort shuffle, the reference) or ``sluice`` (``sluice.configure``
    with ``options`` and nothing else of Sluice's); ``conf`` are plain Spark settings."""
    if shuffle not in ("sort", "sluice"):
        raise ValueError(f"unknown shuffle {shuffle!r}: sort or sluice")
    master = os.environ.get("SLUICE_REAL_MASTER", MASTER)
    return sessions.build_session(
        f"sluice-real-{app}-{shuffle}",
        shuffle,
        master,
        options=options,
        conf={"spark.sql.adaptive.enabled": "false", **conf},
        log_level="WARN",
    )


def dev_cluster() -> ModuleType:
    """dev/cluster's tool (the multi-host test cluster), the module ``sluice_cluster.netcluster`` of dev/."""
    dev = str(Path(__file__).resolve().parent.parent / "dev")
    if dev not in sys.path:
        sys.path.insert(0, dev)
    return importlib.import_module("sluice_cluster.netcluster")


def stage_attempts(spark: SparkSession) -> List[Dict[str, Any]]:
    """Every stage attempt Spark knows (skipped stages included), with its tasks' failure reasons
    and how many of its task attempts were speculative. Use on applications with small stages:
    the REST answer lists every task."""
    out = []
    for s in sessions.rest(spark, "stages?details=true"):
        tasks = list((s.get("tasks") or {}).values())
        out.append(
            {
                "stage": int(s["stageId"]),
                "attempt": int(s["attemptId"]),
                "status": s["status"],
                "name": str(s.get("name", ""))[:100],
                "failure": s.get("failureReason"),
                "tasks": len(tasks),
                "speculative": sum(1 for t in tasks if t.get("speculative")),
                "task_errors": [
                    f"task {t['index']}.{t['attempt']} on {t.get('executorId')}: {t['errorMessage'][:1500]}"
                    for t in tasks
                    if t.get("errorMessage")
                ],
            }
        )
    return sorted(out, key=lambda s: (s["stage"], s["attempt"]))


def open_files(pid: int) -> List[str]:
    """Where the open file descriptors of ``pid`` point (vanished ones left out)."""
    found = []
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in names:
        try:
            found.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return found


def partition_files(root: str) -> List[str]:
    """Sluice's partition files (``sluice-shuffle-*.part``) under ``root``."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        found += [os.path.join(dirpath, f) for f in files if f.startswith("sluice-shuffle-") and f.endswith(".part")]
    return found


_EXCEPTION = re.compile(r"\b((?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error))\b(:[^\n]{0,300})?")


def key_errors(text: str, limit: int = 6) -> List[str]:
    """The distinct Java/Scala exception lines of a traceback, for a readable failure message."""
    seen: List[str] = []
    for match in _EXCEPTION.finditer(text):
        line = (match.group(1) + (match.group(2) or "")).strip()
        if line not in seen:
            seen.append(line)
        if len(seen) >= limit:
            break
    return seen


def run_with_deadline(spark: SparkSession, group: str, seconds: float, job: Callable[[], Any]) -> Dict[str, Any]:
    """Runs ``job`` in job group ``group``; cancels the group after ``seconds`` so that a hang
    becomes an error instead of blocking the application. Returns {answer | error, seconds}."""
    sc = spark.sparkContext
    sc.setJobGroup(group, group, interruptOnCancel=True)
    timed_out = threading.Event()

    def cancel() -> None:
        timed_out.set()
        sc.cancelJobGroup(group)

    timer = threading.Timer(seconds, cancel)
    timer.daemon = True
    started = time.monotonic()
    timer.start()
    out: Dict[str, Any] = {}
    try:
        out["answer"] = job()
    except Exception:
        text = traceback.format_exc()
        out["error"] = (f"no answer within {seconds:.0f}s (job group cancelled)\n" if timed_out.is_set() else "") + text
        out["key_errors"] = key_errors(text)
    finally:
        timer.cancel()
        out["seconds"] = round(time.monotonic() - started, 2)
        sc.setJobGroup("", "")
    return out


def wait_for(condition: Callable[[], Optional[Any]], timeout: float, interval: float = 0.1) -> Optional[Any]:
    """Polls ``condition`` until it returns something truthy (returned) or ``timeout`` passes (None)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    return None


# --- one map stage run alone, then its reduce (decommission and fallback storage runners) ---------
# keyed and sums_by_key run in Python workers, which cannot import this module from tests/:
# cloudpickle sends this module's functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def map_locations(spark: SparkSession, shuffle_id: int) -> List[Dict[str, Any]]:
    """Where the driver's MapOutputTracker says each map output lives (through the test jar)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    out: List[Dict[str, Any]] = []
    for line in str(jvm.org.apache.spark.shuffle.sluice.TestingMapOutputs.locations(shuffle_id)).splitlines():
        if line == "-":
            out.append({"missing": True})
        else:
            map_id, executor, *topology = line.split(" ")
            out.append({"mapId": int(map_id), "executor": executor, "topology": " ".join(topology)})
    return out


def keyed(x: int, keys: int) -> Tuple[int, int]:
    """Row ``x`` of the runners' shuffle: its key and value."""
    return (x * 7919) % keys, x


def sums_by_key(rows: Iterable[Tuple[int, int]]) -> Iterator[Tuple[int, Tuple[int, int]]]:
    """A reduce partition's (key, (sum, count)), computed in Python so that only the shuffle moves rows."""
    acc: Dict[int, List[int]] = {}
    for k, v in rows:
        a = acc.setdefault(k, [0, 0])
        a[0] += v
        a[1] += 1
    for k, (total, count) in acc.items():
        yield k, (total, count)


def expected_sums(n: int, keys: int) -> List[List[Any]]:
    """The answer of ``sums_by_key`` over rows 0..n-1, sorted by key, as the runners record it."""
    out: Dict[int, List[int]] = {}
    for x in range(n):
        k, v = keyed(x, keys)
        e = out.setdefault(k, [0, 0])
        e[0] += v
        e[1] += 1
    return sorted([k, v] for k, v in out.items())


def jobs_and_stages(spark: SparkSession, groups: Sequence[str], timeout: float = 120) -> Dict[str, Any]:
    """Spark's status tracker's jobs of ``groups`` and their stages, once the listener bus has
    delivered every job's end."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + timeout
    while True:
        jobs = [tracker.getJobInfo(j) for g in groups for j in sorted(tracker.getJobIdsForGroup(g))]
        if len(jobs) >= len(groups) and all(j is not None and j.status != "RUNNING" for j in jobs):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the status tracker did not see the jobs of {list(groups)} end: {jobs}")
        time.sleep(0.2)
    stages = []
    for stage_id in sorted({s for j in jobs if j is not None for s in j.stageIds}):
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            stages.append(
                {
                    "id": stage_id,
                    "attempt": info.currentAttemptId,
                    "numTasks": info.numTasks,
                    "completedTasks": info.numCompletedTasks,
                    "failedTasks": info.numFailedTasks,
                }
            )
    return {
        "jobs": [{"id": j.jobId, "status": j.status, "stageIds": list(j.stageIds)} for j in jobs if j is not None],
        "stages": stages,
    }


class StandaloneCluster:
    """A Spark standalone master and one worker per host, each worker on its own loopback address
    (127.0.0.1, 127.0.0.2, ...: Linux routes all of 127.0.0.0/8 to loopback). Spark never
    launches a speculative copy on a host where the task already runs, and every executor of a
    ``local-cluster`` master shares one host, so speculation needs two hosts. Started and stopped
    by the process that uses it (``with StandaloneCluster(work) as master: ...``)."""

    def __init__(self, work: str, hosts: tuple = ("127.0.0.1", "127.0.0.2"), cores: int = 2, memory: str = "2g"):
        import pyspark

        self.work = work
        self.hosts = hosts
        self.cores = cores
        self.memory = memory
        self.spark_class = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
        self.processes: List[subprocess.Popen] = []  # type: ignore[type-arg]

    def __enter__(self) -> str:
        port, ui_port = free_port(), free_port()
        self.master = f"spark://127.0.0.1:{port}"
        self._start(
            "master",
            "127.0.0.1",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui_port),
            ],
        )
        for i, host in enumerate(self.hosts):
            self._start(
                f"worker-{i}",
                host,
                [
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    host,
                    "--port",
                    "0",
                    "--webui-port",
                    "0",
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--work-dir",
                    os.path.join(self.work, f"worker-{i}"),
                    self.master,
                ],
            )

        def registered() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json", timeout=10) as r:
                    state = json.loads(r.read().decode("utf-8"))
                return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE") == len(self.hosts)
            except OSError:
                return False

        if not wait_for(registered, timeout=120, interval=0.5):
            self.__exit__()
            raise RuntimeError(f"the standalone cluster did not come up within 120s; logs in {self.work}")
        return self.master

    def _start(self, name: str, host: str, args: List[str]) -> None:
        env = sessions.app_env(SPARK_LOCAL_IP=host, SPARK_NO_DAEMONIZE="1")
        log = open(os.path.join(self.work, f"{name}.log"), "w")
        self.processes.append(
            subprocess.Popen([self.spark_class] + args, env=env, stdout=log, stderr=subprocess.STDOUT)
        )

    def __exit__(self, *exc: object) -> None:
        for p in reversed(self.processes):  # workers first: each kills its executors on SIGTERM
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=30)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Spark's default spark.port.maxRetries: how far above its base a server's port may be.
SPARK_PORT_MAX_RETRIES = 16


def free_port_base() -> int:
    """A port whose next three are free too, now (another process may still take one later: a
    server's retry upward then goes past it). For ``spark.sluice.network.port`` bases."""
    import socket

    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + 4 > 65535:
            continue
        probes = []
        try:
            for p in range(base, base + 4):
                probe = socket.socket()
                probes.append(probe)
                probe.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
    raise AssertionError("found no four consecutive free ports")
