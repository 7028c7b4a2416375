"""A benchmark's result: the recorder of its runs, summary and goals, and the JSON file written from it."""

from __future__ import annotations

import datetime
import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from sluice_bench.machine import load_average, machine

DEFAULT_OUT = Path("docs") / "benchmarks"


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


def save_result(
    recorder: "Recorder", out: str, name: str, draw: Callable[[Path, Dict[str, Any]], Path]
) -> Tuple[Path, Path]:
    """Writes ``NAME.json`` (NaN as null) and draws ``NAME.png`` from it into ``out``."""
    result = clean_floats(recorder.result())
    path = write_result(Path(out), name, result)
    return path, draw(Path(out) / f"{name}.png", result)
