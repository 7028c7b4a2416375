"""Sluice's node shuffle service for a benchmark run: ``sluice shuffle-service`` started as an
operator starts it, on one address and a port of its own, for every ``sluice-service`` run of the
benchmark (one daemon for the whole run, as one per node serves every application), and stopped
when the run ends, also on a failure. Its log goes beside the applications' logs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Dict, List, Mapping, Optional, Type

from sluice_bench.errors import BenchError

# The contender whose map outputs the service serves (spark.sluice.service.enabled); plain
# ``sluice`` runs serve their own, so one run gives the ratio of the two.
SERVICE_CONTENDER = "sluice-service"
# How much slower reading through the service may be than reading from the executors.
SERVICE_GOAL = 1.05
# How long the daemon may take to say it listens (a JVM's start on a loaded machine).
START_TIMEOUT_S = 180.0


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def sluice_command() -> str:
    """The ``sluice`` command beside this Python (the benchmarks run in Sluice's environment)."""
    found = Path(sys.executable).parent / "sluice"
    if not found.is_file():
        raise BenchError(f"the sluice-service contender needs the sluice command beside {sys.executable}")
    return str(found)


class NodeService:
    """A running ``sluice shuffle-service`` bound to ``host`` on a free port (a context manager)."""

    def __init__(self, log: Path, host: str = "127.0.0.1", env: Optional[Mapping[str, str]] = None) -> None:
        self.host = host
        self.port = free_port(host)
        self.log = log
        self._env = dict(os.environ if env is None else env)
        self._env.pop("SPARK_HOME", None)
        self._log_file: Optional[IO[str]] = None
        self.process: Optional["subprocess.Popen[str]"] = None

    @property
    def pid(self) -> int:
        """The service's JVM (``sluice shuffle-service`` replaces itself with it)."""
        if self.process is None:
            raise BenchError("the node service has not started")
        return self.process.pid

    @property
    def settings(self) -> Dict[str, str]:
        """What an application sets to use this service."""
        return {"service_enabled": "true", "service_port": str(self.port)}

    def __enter__(self) -> "NodeService":
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log, "w")
        argv: List[str] = [sluice_command(), "shuffle-service", "--host", self.host]
        argv += ["--conf", f"spark.sluice.service.port={self.port}"]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log_file, env=self._env, text=True)
        line = self._first_line(START_TIMEOUT_S)  # "Sluice shuffle service listening on HOST:PORT"
        if not line.rstrip().endswith(f"listening on {self.host}:{self.port}"):
            self.__exit__(None, None, None)
            said = repr(line.strip()) if line else f"no line within {START_TIMEOUT_S:.0f} s, or it exited"
            raise BenchError(
                f"the Sluice shuffle service did not start on {self.host}:{self.port} ({said}); its log: {self.log}"
            )
        return self

    def _first_line(self, timeout: float) -> str:
        """The service's first line of output; "" when it exits or says nothing within ``timeout``."""
        assert self.process is not None and self.process.stdout is not None
        stdout = self.process.stdout
        lines: List[str] = []
        reader = threading.Thread(target=lambda: lines.append(stdout.readline()), name="node-service-start")
        reader.daemon = True  # left blocked on a hung service's output until __exit__ closes it
        reader.start()
        reader.join(timeout)
        return lines[0] if lines else ""

    def status(self) -> Dict[str, Any]:
        """The service's metrics (``sluice shuffle-service --status``); empty when it did not answer."""
        done = subprocess.run(
            [sluice_command(), "shuffle-service", "--status", f"{self.host}:{self.port}"],
            capture_output=True,
            text=True,
            timeout=120,
            env=self._env,
        )
        if done.returncode != 0:
            return {}
        found: Dict[str, Any] = json.loads(done.stdout)
        return found

    def __exit__(
        self, kind: Optional[Type[BaseException]], error: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


def service_log(log_dir: Path, benchmark: str) -> Path:
    return log_dir / f"{benchmark}-node-service-{time.strftime('%H%M%S')}-{os.getpid()}.log"
