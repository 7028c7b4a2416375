"""Sluice's network stack starts with the executor (its plugin starts it, as Spark starts its own
block transfer service), so an application's first shuffle task does not pay for the server, the
buffer pool and the transport's start; each executor connects to its peers' servers as soon as the
driver names them, so the first reduce task does not wait for a connection; and several executors
of one application on one host with one known Sluice port share it: a fixed
``spark.sluice.network.port`` is a base, and each executor's server binds the first free port at or
above it (up to ``spark.port.maxRetries`` more), as Spark's own services do. An executor on the
Spark and Sluice jars the driver checked does not check Spark's internals again.

One application (``run_executor_start.py``: two executors on one host, a fixed port base, a job
without a shuffle and then a shuffle) shows all of it; each test judges one part.
"""

from __future__ import annotations

from typing import Any, Dict

import pytest
from realapps import SPARK_PORT_MAX_RETRIES, free_port_base
from sessions import run_runner


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    base = free_port_base()
    result, _ = run_runner("run_executor_start.py", ["--port", str(base)], tmp_path_factory.mktemp("executor-start"))
    result["port_base"] = base
    return result


def test_network_stack_runs_before_the_first_shuffle_task(started: Dict[str, Any]) -> None:
    result = started
    assert result["no_shuffle"] == list(range(8))
    # Both servers ran while no task had used Sluice (no task's metrics reached the driver).
    assert len(result["ports_before_any_shuffle"]) == 2, result
    assert result["stages_before_any_shuffle"] == 0, result
    # The shuffle ran on the servers started with the executors, not on new ones.
    assert result["ports_after_a_shuffle"] == result["ports_before_any_shuffle"], result
    assert result["got"] == result["expected"]


def test_executors_connect_to_each_other_before_the_first_shuffle(started: Dict[str, Any]) -> None:
    result = started
    # Before any task used Sluice, each executor held one connection to the other's server ...
    assert result["stages_before_any_shuffle"] == 0, result
    assert result["client_connections_before_any_shuffle"] == [1, 1], result
    assert result["server_connections_before_any_shuffle"] == [1, 1], result
    # ... and the shuffle, which read remotely both ways, ran on them: neither executor opened a
    # connection since (one closed and opened again, or a reader's own, would count).
    assert started["remote_bytes"] > 0
    assert result["client_connections_opened_before_any_shuffle"] == [1, 1], result
    assert result["client_connections_opened_after_a_shuffle"] == [1, 1], result


def test_two_executors_on_one_host_share_a_port_base(started: Dict[str, Any]) -> None:
    base, ports = started["port_base"], started["ports_after_a_shuffle"]
    assert len(ports) == 2 and ports[0] != ports[1], ports
    # Both within the range: the base and the ports above it that spark.port.maxRetries allows.
    assert all(base <= p <= base + SPARK_PORT_MAX_RETRIES for p in ports), (base, ports)
    assert started["remote_bytes"] > 0, "the executors read nothing from each other"
    assert started["got"] == started["expected"]


def test_executors_on_the_drivers_builds_do_not_check_sparks_internals_again(started: Dict[str, Any]) -> None:
    # The driver checked Spark's internals and published what it checked: Spark's build and the
    # jars (Spark's modules, Sluice's own) by name and size.
    checked = started["checked_build"]
    assert checked and checked.startswith("v1;"), checked
    assert "spark-core_2.13-" in checked and "sluice" in checked.lower(), checked
    # Both executors run those same jars: neither linked the boundary's references again.
    assert started["executor_logs"] == 2, started
    assert started["executors_that_skipped_the_check"] == 2, started
    assert started["executors_that_checked_internals"] == 0, started
    assert started["got"] == started["expected"]
