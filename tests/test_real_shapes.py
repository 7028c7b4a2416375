"""The real-shapes goal: Sluice completes the shapes of real jobs and survives real failures with
its defaults (``sluice.configure(builder)`` and nothing else) on ``local-cluster[2,2,2048]`` (two
task slots per executor), AQE off.

Shapes (``run_real_shapes.py``, answers compared with the sort shuffle's, stored by
``reference.py``): a sort-merge join of two ~50 MB sides in both credit modes. The wide shapes'
sizes are checked where they cost least: 4000 maps x 200 reducers and 200 x 4000 in the engine's
simulated cluster (``SimulatedClusterSuite``), 1500 x 400 through Spark on 12 executors
(``test_many_executors.py``), all of them against the sort shuffle in ``sluice bench scale``.
Failures (``run_real_failures.py``, one application each): a speculated straggling reducer, a job
cancelled with interrupts while its reducers read and its shuffle read again, 3 shuffles of 120
maps kept and then dropped (open files, deleted files), and an executor SIGSTOPped mid-read.

Every application runs in its own process group with a generous timeout: a hang fails the test
and everything the application started is killed; temporary directories are removed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional

import pytest
import reference
from sessions import app_env

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = os.path.join(HERE, "run_real_shapes.py")
FAILURES = os.path.join(HERE, "run_real_failures.py")
REQUEST_TIMEOUT_S = 45


def run_app(args: List[str], timeout: float, master: Optional[str] = None) -> Dict[str, Any]:
    """Runs a runner script with ``args`` (plus ``--out``) in a new process group, local dirs in a
    temporary directory, on ``master`` if given (else the runner's ``local-cluster[2,2,2048]``);
    returns its JSON with ``local_dirs_files`` and the log's tail added."""
    work = tempfile.mkdtemp(prefix="sluice-real-")
    try:
        local_dirs = os.path.join(work, "local")
        os.makedirs(local_dirs)
        out = os.path.join(work, "out.json")
        log_path = os.path.join(work, "app.log")
        env = app_env(SPARK_LOCAL_DIRS=local_dirs, **({"SLUICE_REAL_MASTER": master} if master else {}))
        cmd = [sys.executable] + [a.replace("{work}", work) for a in args] + ["--out", out]
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                kill_group(proc.pid)
        with open(log_path, errors="replace") as f:
            tail = f.read()[-8000:]
        if code is None:
            raise AssertionError(f"{' '.join(cmd)} did not finish within {timeout:.0f}s (hung); log tail:\n{tail}")
        if code != 0 or not os.path.exists(out):
            raise AssertionError(f"{' '.join(cmd)} failed ({code}); log tail:\n{tail}")
        with open(out) as f:
            result: Dict[str, Any] = json.load(f)
        result["log_tail"] = tail
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def kill_group(pgid: int) -> None:
    """Kills whatever is left of the application's process group (executors, workers)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def task_errors(result: Dict[str, Any]) -> List[str]:
    return [e for s in result["stages"] for e in s["task_errors"]] + [
        s["failure"] for s in result["stages"] if s.get("failure")
    ]


def retried_stages(result: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [s for s in result["stages"] if s["attempt"] > 0]


# --- shapes ------------------------------------------------------------------------------------


def check_run(name: str, run: Dict[str, Any]) -> None:
    """The workload ran through Sluice and gave the sort shuffle's answer (stored, ``reference.py``)."""
    assert "error" not in run, (
        f"{name} failed through Sluice after {run['seconds']}s: {run['key_errors']}\n{run['error'][-3000:]}"
    )
    wrong = reference.mismatches({name: run["answer"]}, "real_shapes", [name])
    assert not wrong, f"{wrong}: Sluice's answer {run['answer']}"


@pytest.mark.parametrize("credit_based", [True, False], ids=["credit_based", "credit_less"])
def test_sort_merge_join_in_both_credit_modes(credit_based: bool) -> None:
    """A sort-merge join of two ~50 MB sides over 8 partitions: the sort shuffle's answer at the
    first attempt of every stage and task. A reader stuck until its request timed out (45 s here)
    would fail its task with a FetchFailedException and retry the map stage: no such failure."""
    args = [
        SHAPES,
        "--shuffle",
        "sluice",
        "--workloads",
        "smj_join",
        f"--option=request_timeout={REQUEST_TIMEOUT_S}s",
        "--deadline",
        "300",
        "--stages",
    ]
    if not credit_based:
        args.append("--option=credit_based=false")
    result = run_app(args, timeout=900)
    check_run("smj_join", result["runs"]["smj_join"])
    assert sum(s["tasks"] for s in result["stages"]) >= 8, f"Spark listed no join tasks: {result['stages']}"
    errors = [e for s in result["stages"] for e in s["task_errors"]]
    assert not errors, "\n".join(errors)
    assert not retried_stages(result), retried_stages(result)


# --- failures ----------------------------------------------------------------------------------


def test_speculative_copy_of_a_straggling_reducer() -> None:
    """Speculation on, the first attempt of one reducer straggles mid-read: a speculative copy
    reads the same map outputs on the other host and wins, the original is killed; the answer is
    exact, no fetch failed and no stage ran twice. A standalone cluster with one worker on
    127.0.0.1 and one on 127.0.0.2: Spark never speculates on the host the task runs on."""
    result = run_app([FAILURES, "speculation", "--standalone", "{work}"], timeout=900)
    assert result["executor_hosts"] == ["127.0.0.1", "127.0.0.2"], result["executor_hosts"]
    assert result["equal"], "wrong answer"
    assert sum(s["speculative"] for s in result["stages"]) >= 1, f"no speculative attempt ran: {result['stages']}"
    assert result["seconds"] < result["straggler_sleep_s"], "the straggler, not its speculative copy, finished"
    errors = task_errors(result)
    assert not [e for e in errors if "FetchFailed" in e], "\n".join(errors)
    assert not retried_stages(result), retried_stages(result)


def test_cancel_while_reducers_read_then_read_the_same_shuffle_again() -> None:
    """A job group cancelled with interruptOnCancel while its reducers read; a second job on the
    same shuffle skips the map stage and gives the exact answer, without a FetchFailed or a
    second attempt of any stage (an interrupted reader must not break the partitions it read)."""
    result = run_app([FAILURES, "cancel"], timeout=900)
    assert result["cancelled_while_reading"], "the reduce stage never ran with two tasks reading"
    assert not result["first_finished"], "the first job finished before it was cancelled"
    assert "cancel" in result["first_error"].lower(), result["first_error"]
    assert result["equal"], "wrong answer from the shuffle read again"
    assert result["second_skipped_stages"] >= 1, f"the map stage ran again: {result['second_stages']}"
    errors = task_errors(result)
    assert not [e for e in errors if "FetchFailed" in e], "\n".join(errors)
    assert not retried_stages(result), retried_stages(result)


@pytest.mark.timeout(1800)  # the application's own deadline of 1500 s
def test_many_shuffles_hold_no_open_files_and_are_deleted_when_dropped() -> None:
    """3 shuffles x 120 maps, all kept referenced: once the jobs are done (and the servers' kept
    files have gone idle, within 15 s) no executor holds a partition file open; once the
    references are dropped and the driver GCs, ContextCleaner unregisters the shuffles and every
    partition file is deleted. (That thousands of kept map outputs hold no descriptor each is
    SimulatedClusterSuite's, on the JVM alone.)"""
    result = run_app([FAILURES, "many_shuffles"], timeout=1500)
    assert result["equal"], "wrong answer"
    assert result["partition_files_while_referenced"] >= result["shuffles"] * result["maps"], (
        f"{result['partition_files_while_referenced']} partition files: fewer than the map outputs"
    )
    assert len(result["executor_pids"]) == 2, result["executor_pids"]
    assert all(n == 0 for n in result["open_partition_files"].values()), (
        f"partition files open while idle: {result['open_partition_files']} (total fds {result['open_fds']})"
    )
    assert result["deleted_after_gc"], f"{result['partition_files_left']} partition files left after GC"


def test_stopped_executor_surfaces_as_fetch_failed() -> None:
    """One executor SIGSTOPped while the reduce stage reads from it, Spark's default failure
    limits, spark.network.timeout=20s: the answer is exact and the reduce stage failed with a
    FetchFailed (Spark recomputes the lost outputs), not a TimeoutException."""
    result = run_app([FAILURES, "sigstop"], timeout=900)
    assert result["stopped"], "the reduce stage finished before an executor could be stopped"
    assert result["equal"], "wrong answer"
    errors = task_errors(result)
    seen = (
        f"executor {result['stopped_executor']} stopped at {result['stopped_clock']}; job {result['seconds']} s, "
        f"{result['seconds_after_stop']} s after the stop; stages {result['stages']}"
    )
    assert [e for e in errors if "FetchFailed" in e], f"no FetchFailed ({seen}):\n" + "\n".join(errors)
    assert not [e for e in errors if "TimeoutException" in e], "\n".join(errors)
