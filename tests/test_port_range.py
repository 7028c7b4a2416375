"""Several executors of one application on one host with one known Sluice port: a fixed
``spark.sluice.network.port`` is a base, and each executor's server binds the first free port at
or above it (up to ``spark.port.maxRetries`` more), as Spark's own services do."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile

from sessions import app_env

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_RETRIES = 16  # Spark's spark.port.maxRetries default


def _free_base() -> int:
    """A port whose next few are free now (another process may still take one: the retry is then
    what the test sees working)."""
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


def test_two_executors_on_one_host_share_a_port_base() -> None:
    base = _free_base()
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
    assert all(base <= p <= base + MAX_RETRIES for p in ports), (base, ports)
    assert result["remote_bytes"] > 0, "the executors read nothing from each other"
    assert result["got"] == result["expected"]
