"""What every benchmark shares: statistics, the alternation of contenders, the machine's
description, running one Spark application in its own Python process, progress and results."""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, TypeVar

DEFAULT_OUT = Path("docs") / "benchmarks"
# Each application's output (Spark's log, the worker's traceback) lands here, named in errors.
LOG_DIR = Path(os.environ.get("SLUICE_CACHE", Path.home() / ".cache" / "sluice")) / "bench-logs"


class BenchError(RuntimeError):
    """A benchmark could not run (a contender's application failed, a tool is missing)."""


class MismatchError(RuntimeError):
    """Sluice's answers differ from the reference's: the benchmark's numbers are void."""


# --- statistics -----------------------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    """The median of ``values`` (the mean of the middle two for an even count); NaN when empty."""
    data = [float(v) for v in values]
    return float(statistics.median(data)) if data else float("nan")


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, NaN when the denominator is 0 or NaN."""
    if denominator == 0 or denominator != denominator:
        return float("nan")
    return numerator / denominator


def spread(values: Sequence[float]) -> Dict[str, float]:
    """Median, least, most and count of ``values`` (empty when there are none)."""
    if not values:
        return {}
    return {"median": median(values), "min": min(values), "max": max(values), "runs": len(values)}


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of already sorted values, by linear interpolation."""
    if not sorted_values:
        return float("nan")
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def alternation(contenders: Sequence[str], rounds: int) -> List[Tuple[int, str]]:
    """The order runs are made in: every contender once per round, in the same order each round
    (A B A B ...), so drift of a shared machine hits each contender alike."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    return [(r, c) for r in range(1, rounds + 1) for c in contenders]


def goal(name: str, value: float, target: float, *, at_most: bool, unit: str = "") -> Dict[str, Any]:
    """A goal as the result JSON records it: ``value`` against ``target`` (an upper bound when
    ``at_most``, else a lower bound), and whether it was met (never with a NaN value)."""
    met = value == value and (value <= target if at_most else value >= target)
    return {"goal": name, "value": value, "target": target, "at_most": at_most, "unit": unit, "met": bool(met)}


def sluice_options(args: Any) -> Dict[str, str]:
    """The ``--option NAME=VALUE`` pairs of a ``sluice bench`` command line."""
    return dict(option.split("=", 1) for option in getattr(args, "option", None) or [])


# --- the machine ------------------------------------------------------------------------------


def load_average() -> List[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return float("nan")


def java_version() -> str:
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = (done.stderr or done.stdout).splitlines()
    return " / ".join(line.strip() for line in lines[:2]) if lines else "unknown"


def machine() -> Dict[str, Any]:
    """The machine a run is made on: cores, CPU, memory, kernel, Java/Spark/Sluice versions."""
    import pyspark
    import sluice

    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model(),
        "memory_gib": memory_gib(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "java": java_version(),
        "spark": pyspark.__version__,
        "sluice": sluice.__version__,
    }


# --- results ----------------------------------------------------------------------------------


@dataclass
class Recorder:
    """Collects one benchmark's result: machine, command, settings, raw runs, summary, goals."""

    name: str
    command: str
    settings: Dict[str, Any]
    started: str = field(default_factory=lambda: _now())
    load_before: List[float] = field(default_factory=load_average)
    runs: List[Dict[str, Any]] = field(default_factory=list)
    summary: Dict[str, Any] = field(default_factory=dict)
    goals: List[Dict[str, Any]] = field(default_factory=list)
    mismatches: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def result(self) -> Dict[str, Any]:
        return {
            "benchmark": self.name,
            "command": self.command,
            "started": self.started,
            "finished": _now(),
            "machine": dict(machine(), load_before=self.load_before, load_after=load_average()),
            "settings": self.settings,
            "summary": self.summary,
            "goals": self.goals,
            "mismatches": self.mismatches,
            "notes": self.notes,
            "runs": self.runs,
        }


def subtitle_of(result: Dict[str, Any]) -> str:
    """A chart's subtitle: rounds, cores and the load average before and after the run."""
    m = result["machine"]
    rounds = result["settings"].get("rounds", "?")
    return f"{rounds} rounds, {m['nproc']} cores, load average {m['load_before'][0]:.1f} -> {m['load_after'][0]:.1f}"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def command_line(argv: Optional[Sequence[str]] = None) -> str:
    """The command as the user typed it (``sluice bench ...``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return "sluice " + " ".join(shlex.quote(a) for a in args)


def write_result(out_dir: Path, name: str, result: Dict[str, Any]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(result, indent=1, sort_keys=False, default=_json_default) + "\n")
    return path


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return None
    return str(value)


def clean_floats(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by None, so the JSON stays standard."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: clean_floats(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_floats(v) for v in value]
    return value


# --- progress ---------------------------------------------------------------------------------


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
) -> None:
    """One application per contender per round, alternated, each run (with its round number)
    appended to ``recorder.runs``."""

    def one(item: Tuple[int, str]) -> None:
        round_number, contender = item
        result = run_app(kind, contender, spec, timeout=timeout, log_dir=LOG_DIR)
        result["round"] = round_number
        recorder.runs.append(result)

    run_plan(alternation(contenders, rounds), f"bench {kind}", lambda i: f"round {i[0]}: {i[1]}", one)


def save_result(
    recorder: "Recorder", out: str, name: str, draw: Callable[[Path, Dict[str, Any]], Path]
) -> Tuple[Path, Path]:
    """Writes ``NAME.json`` (NaN as null) and draws ``NAME.png`` from it into ``out``."""
    result = clean_floats(recorder.result())
    path = write_result(Path(out), name, result)
    return path, draw(Path(out) / f"{name}.png", result)


# --- one Spark application per process ------------------------------------------------------


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


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"32m"`` -> 33554432 (k, m, g, t are powers of 1024)."""
    match = _SIZE.match(text.strip())
    if not match:
        raise ValueError(f"not a size: {text!r}")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)
