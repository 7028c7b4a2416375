"""A lost executor: its map outputs are recomputed and the answer is exact (no hang, no wrong
answer). The executor JVM is killed with SIGKILL while the reduce stage reads from it."""

from __future__ import annotations

from pathlib import Path

from sessions import run_runner


def test_killed_executor_during_reduce_gives_exact_answer(tmp_path: Path) -> None:
    result, stderr = run_runner("run_executor_loss.py", [], tmp_path)
    assert result["killed"], "the reduce stage finished before an executor could be killed"
    assert result["got"] == result["expected"]
    # Spark saw the loss and recomputed: the failed fetches name the executor Sluice read from.
    assert "FetchFailed" in stderr, stderr[-3000:]
