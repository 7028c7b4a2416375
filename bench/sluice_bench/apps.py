"""Running the benchmarks' Spark applications: one per contender and round, each in its own Python
process, under a progress bar."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, TypeVar

from sluice_bench.errors import BenchError
from sluice_bench.machine import load_average
from sluice_bench.results import Recorder
from sluice_bench.stats import alternation

# Each application's output (Spark's log, the worker's traceback) lands here, named in errors.
LOG_DIR = Path(os.environ.get("SLUICE_CACHE", Path.home() / ".cache" / "sluice")) / "bench-logs"


class Progress:
    """A tqdm progress bar over the planned runs (a plain log when tqdm is missing)."""

    def __init__(self, total: int, description: str) -> None:
        self.description = description
        try:
            from tqdm import tqdm  # type: ignore[import-untyped]

            self.bar: Any = tqdm(total=total, desc=description, unit="run", dynamic_ncols=True)
        except ImportError:  # pragma: no cover - tqdm is a dependency of the bench extra
            self.bar = None
        self.total = total
        self.done = 0

    def step(self, label: str) -> None:
        """Says what runs next."""
        if self.bar is not None:
            self.bar.set_postfix_str(label, refresh=True)
        else:
            print(f"[{self.done + 1}/{self.total}] {self.description}: {label}", file=sys.stderr, flush=True)

    def advance(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)

    def write(self, message: str) -> None:
        if self.bar is not None:
            self.bar.write(message)
        else:
            print(message, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


T = TypeVar("T")


def run_plan(plan: Sequence[T], description: str, label: Callable[[T], str], run_one: Callable[[T], None]) -> None:
    """Runs ``run_one`` for every planned item in order under a progress bar labelled ``label``."""
    progress = Progress(len(plan), description)
    try:
        for item in plan:
            progress.step(label(item))
            run_one(item)
            progress.advance()
    finally:
        progress.close()


def run_alternating_apps(
    recorder: "Recorder",
    kind: str,
    spec: Dict[str, Any],
    rounds: int,
    timeout: float,
    contenders: Sequence[str] = ("sluice", "sort"),
    failed_run: Optional[Callable[[str, str], Dict[str, Any]]] = None,
) -> None:
    """One application per contender per round, alternated, each run (with its round number and
    the machine's load average before and after it) appended to ``recorder.runs``. An application
    that fails or outlives ``timeout`` raises :class:`BenchError`, unless ``failed_run`` is given:
    then ``failed_run(contender, message)`` is recorded as its run and the next one starts."""

    def one(item: Tuple[int, str]) -> None:
        round_number, contender = item
        load_before = load_average()
        try:
            result = run_app(kind, contender, spec, timeout=timeout, log_dir=LOG_DIR)
        except BenchError as e:
            if failed_run is None:
                raise
            result = failed_run(contender, str(e))
        result.update(round=round_number, load_before=load_before, load_after=load_average())
        recorder.runs.append(result)

    run_plan(alternation(contenders, rounds), f"bench {kind}", lambda i: f"round {i[0]}: {i[1]}", one)


def run_app(
    kind: str,
    contender: str,
    spec: Dict[str, Any],
    *,
    timeout: float,
    log_dir: Path,
    launcher: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """Runs one contender's Spark application (``sluice_bench.worker``) in a new Python process
    (a Python process can start Spark's driver JVM only once) and returns what it wrote. The
    process starts through ``launcher`` (e.g. ``ip netns exec NS``: the driver in a cluster's
    host) with ``env`` (default this process's environment).

    Raises:
        BenchError: when the application fails or takes longer than ``timeout`` seconds; the
            message ends with the tail of its log.
    """
    return run_apps_together(kind, {contender: spec}, timeout=timeout, log_dir=log_dir, launcher=launcher, env=env)[
        contender
    ]


def run_apps_together(
    kind: str,
    specs: Mapping[str, Dict[str, Any]],
    *,
    timeout: float,
    log_dir: Path,
    launcher: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
) -> Dict[str, Dict[str, Any]]:
    """:func:`run_app` for several contenders at once (``specs``: contender -> spec), each in its
    own process, all running at the same time; their results by contender. If one fails or they
    take longer than ``timeout`` seconds in all, every one still running is stopped and the
    first failure raised."""
    log_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%H%M%S")
    app_env = dict(os.environ if env is None else env)
    app_env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    app_env.pop("SPARK_HOME", None)
    app_env.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix=f"sluice-bench-{kind}-") as tmp:
        apps: Dict[str, Tuple[subprocess.Popen[bytes], Path, Path, IO[str]]] = {}
        try:
            for contender, spec in specs.items():
                log = log_dir / f"{kind}-{contender}-{stamp}-{os.getpid()}.log"
                spec_file, out_file = Path(tmp, f"{contender}-spec.json"), Path(tmp, f"{contender}-out.json")
                spec_file.write_text(json.dumps(spec))
                command = [*launcher, sys.executable, "-m", "sluice_bench.worker", kind, contender]
                log_file = open(log, "w")
                process = subprocess.Popen(
                    [*command, str(spec_file), str(out_file)], stdout=log_file, stderr=subprocess.STDOUT, env=app_env
                )
                apps[contender] = (process, log, out_file, log_file)
            deadline = time.monotonic() + timeout
            results: Dict[str, Dict[str, Any]] = {}
            while len(results) < len(apps):
                for contender, (process, log, out_file, _) in apps.items():
                    if contender in results or process.poll() is None:
                        continue
                    if process.returncode != 0 or not out_file.is_file():
                        raise BenchError(
                            f"{kind}/{contender} failed (exit {process.returncode}); log: {log}\n{tail(log)}"
                        )
                    results[contender] = dict(json.loads(out_file.read_text()), log=str(log))
                if len(results) < len(apps):
                    if time.monotonic() > deadline:
                        late = next(c for c in apps if c not in results)
                        log = apps[late][1]
                        raise BenchError(f"{kind}/{late} took longer than {timeout:.0f}s; log: {log}\n{tail(log)}")
                    time.sleep(0.2)
            return results
        finally:
            for process, _, _, app_log in apps.values():
                if process.poll() is None:
                    process.kill()
                    process.wait()
                app_log.close()


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])
