"""Several executors of one application on one host with one known Sluice port: a fixed
``spark.sluice.network.port`` is a base, and each executor's server binds the first free port at
or above it (up to ``spark.port.maxRetries`` more), as Spark's own services do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from realapps import SPARK_PORT_MAX_RETRIES, free_port_base
from sessions import app_env

HERE = os.path.dirname(os.path.abspath(__file__))


def test_two_executors_on_one_host_share_a_port_base() -> None:
    base = free_port_base()
    out = os.path.join(tempfile.mkdtemp(prefix="sluice-ports-"), "result.json")
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "run_port_range.py"), "--port", str(base), "--out", out],
        env=app_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    with open(out) as f:
        result = json.load(f)
    ports = result["ports"]
    assert len(ports) == 2 and ports[0] != ports[1], ports
    # Both within the range: the base and the ports above it that spark.port.maxRetries allows.
    assert all(base <= p <= base + SPARK_PORT_MAX_RETRIES for p in ports), (base, ports)
    assert result["remote_bytes"] > 0, "the executors read nothing from each other"
    assert result["got"] == result["expected"]
