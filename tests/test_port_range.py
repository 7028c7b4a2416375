"""Several executors of one application on one host with one known Sluice port: a fixed
``spark.sluice.network.port`` is a base, and each executor's server binds the first free port at
or above it (up to ``spark.port.maxRetries`` more), as Spark's own services do."""

from __future__ import annotations

from pathlib import Path

from realapps import SPARK_PORT_MAX_RETRIES, free_port_base
from sessions import run_runner


def test_two_executors_on_one_host_share_a_port_base(tmp_path: Path) -> None:
    base = free_port_base()
    result, _ = run_runner("run_port_range.py", ["--port", str(base)], tmp_path)
    ports = result["ports"]
    assert len(ports) == 2 and ports[0] != ports[1], ports
    # Both within the range: the base and the ports above it that spark.port.maxRetries allows.
    assert all(base <= p <= base + SPARK_PORT_MAX_RETRIES for p in ports), (base, ports)
    assert result["remote_bytes"] > 0, "the executors read nothing from each other"
    assert result["got"] == result["expected"]
