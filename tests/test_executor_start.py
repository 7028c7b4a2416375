"""Sluice's network stack starts with the executor (its plugin starts it, as Spark starts its own
block transfer service), so an application's first shuffle task does not pay for the server, the
buffer pool and the transport's start."""

from __future__ import annotations

from pathlib import Path

from sessions import run_runner


def test_network_stack_runs_before_the_first_shuffle_task(tmp_path: Path) -> None:
    result, _ = run_runner("run_executor_start.py", [], tmp_path)
    assert result["no_shuffle"] == list(range(8))
    # Both servers ran while no task had used Sluice (no task's metrics reached the driver).
    assert len(result["ports_before_any_shuffle"]) == 2, result
    assert result["stages_before_any_shuffle"] == 0, result
    # The shuffle ran on the servers started with the executors, not on new ones.
    assert result["ports_after_a_shuffle"] == result["ports_before_any_shuffle"], result
    assert result["counts"] == [[k, 1000] for k in range(10)]
