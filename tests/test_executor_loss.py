"""A lost executor: its map outputs are recomputed and the answer is exact (no hang, no wrong
answer). The executor JVM is killed with SIGKILL while the reduce stage reads from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from sessions import app_env

HERE = os.path.dirname(os.path.abspath(__file__))


def test_killed_executor_during_reduce_gives_exact_answer() -> None:
    out = os.path.join(tempfile.mkdtemp(prefix="sluice-loss-"), "result.json")
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "run_executor_loss.py"), "--out", out],
        env=app_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    with open(out) as f:
        result = json.load(f)
    assert result["killed"], "the reduce stage finished before an executor could be killed"
    assert result["got"] == result["expected"]
    # Spark saw the loss and recomputed: the failed fetches name the executor Sluice read from.
    assert "FetchFailed" in proc.stderr, proc.stderr[-3000:]
