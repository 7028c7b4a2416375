"""Sluice's node shuffle service for a test: ``sluice shuffle-service`` started as a user starts it,
on loopback and a port of its own, its log kept, and stopped (SIGTERM, then SIGKILL) whatever
happens. Only this process's own service is observed."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import sessions
from pyspark.sql import SparkSession
from sessions import app_env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class NodeService:
    """A running ``sluice shuffle-service``: its port, its log, its status."""

    def __init__(
        self,
        work: Path,
        settings: Optional[Dict[str, str]] = None,
        port: Optional[int] = None,
        name: str = "node-service",
    ) -> None:
        self.port = port or free_port()
        self.log = work / f"{name}.log"
        confs: List[str] = []
        for key, value in {"spark.sluice.service.port": str(self.port), **(settings or {})}.items():
            confs += ["--conf", f"{key}={value}"]
        self._log_file = open(self.log, "w")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "sluice"), "shuffle-service", "--host", "127.0.0.1", *confs],
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            env=app_env(),
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # "Sluice shuffle service listening on HOST:PORT", or "" when it died
        if "listening on" not in line:
            self.stop()
            raise AssertionError(f"the node shuffle service did not start: {line!r} {self.log.read_text()[-4000:]}")

    def status(self) -> Dict[str, Any]:
        """The service's metrics (``sluice shuffle-service --status``)."""
        out = subprocess.run(
            [str(Path(sys.executable).parent / "sluice"), "shuffle-service", "--status", f"127.0.0.1:{self.port}"],
            capture_output=True,
            text=True,
            timeout=120,
            env=app_env(),
        )
        assert out.returncode == 0, out.stderr[-3000:]
        status: Dict[str, Any] = json.loads(out.stdout)
        return status

    def log_text(self) -> str:
        self._log_file.flush()
        return self.log.read_text()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        self._log_file.close()


def session(app: str, port: int, conf: Dict[str, str]) -> SparkSession:
    """A Sluice application on ``local-cluster[2,1,1024]`` whose map outputs the node service on
    ``port`` serves, with ``conf`` beside."""
    return sessions.build_session(
        app,
        "sluice",
        "local-cluster[2,1,1024]",
        options={"service_enabled": True, "service_port": port},
        conf=conf,
        log_level="WARN",
    )


def running(work: Path, settings: Optional[Dict[str, str]] = None) -> Iterator[NodeService]:
    """A node service for the duration of a fixture."""
    service = NodeService(work, settings)
    try:
        yield service
    finally:
        service.stop()


def wait_until(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return bool(condition())
