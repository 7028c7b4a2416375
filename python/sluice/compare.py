"""``sluice compare``: a user's own application, run alternately with Spark's sort shuffle and with
Sluice, compared per job and in total.

Each round runs the application once with each shuffle, through pyspark's spark-submit with the
user's own arguments, the first contender alternating from round to round (sort then Sluice, then
Sluice then sort), so drift of a shared cluster hits both alike. Each run writes an uncompressed
event log into a directory of its own, from which :mod:`sluice.eventlog` reads wall time,
Spark's executor CPU time of the tasks, shuffle bytes written and fetch wait, per job and for the
application. The report gives each figure's median and spread (least to most) per contender, the
ratio of the medians, and a verdict: a difference counts only when every run of one contender lies
below every run of the other; otherwise the spread covers the gap and the verdict says "no
difference beyond noise".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from sluice import eventlog
from sluice._submit import deploy_mode, split, submit_command, submit_environment

CONTENDERS = ("sort", "sluice")
LABELS = {"sort": "sort shuffle", "sluice": "Sluice"}
FIGURE_LABELS = {
    "wall_s": "wall time",
    "executor_cpu_s": "executor CPU",
    "shuffle_bytes": "shuffle bytes",
    "fetch_wait_s": "fetch wait",
}
NO_DIFFERENCE = "no difference beyond noise"
DEFAULT_ROUNDS = 3
DEFAULT_TIMEOUT_S = 3600.0


def parser() -> argparse.ArgumentParser:
    from sluice.cli import _add_sluice_options

    p = argparse.ArgumentParser(
        prog="sluice compare",
        usage="sluice compare [--rounds N] [--out DIR] [--json FILE] [Sluice options] -- "
        "[spark-submit options] app.py [app arguments]",
        allow_abbrev=False,
        description="Runs your application alternately with Spark's sort shuffle and with Sluice (Sluice's "
        "options below), N rounds on the same arguments, and reports per job and in total: wall time, "
        "executor CPU (Spark's task CPU time), shuffle bytes written and fetch wait, with medians, spread and "
        "a verdict. A difference is reported only when every run of one lies below every run of the other; "
        "otherwise the verdict is 'no difference beyond noise'. Everything after `--` is spark-submit's and "
        "the application's, as for `sluice submit`; the driver must run on this machine (client deploy mode), "
        "where the runs' event logs are read.",
    )
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="rounds, each running both (default %(default)s)")
    p.add_argument(
        "--out", type=Path, help="where the runs' logs and event logs go (default: a new temporary directory)"
    )
    p.add_argument("--json", type=Path, help="also write the runs and the comparison to this JSON file")
    p.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds one run may take (default %(default)s)"
    )
    _add_sluice_options(p)
    return p


@dataclass
class Run:
    """One run of the application: its round, contender, exit status, log and what its event log says."""

    round: int
    contender: str
    seconds: float
    log: str
    application: Optional[eventlog.Application]


@dataclass(frozen=True)
class Spread:
    """A figure over the runs of one contender."""

    median: float
    least: float
    most: float
    runs: int


def spread(values: Sequence[float]) -> Spread:
    return Spread(float(statistics.median(values)), min(values), max(values), len(values))


def verdict(sort: Spread, sluice: Spread) -> str:
    """Whether Sluice's runs differ from the sort shuffle's beyond their spread."""
    if sort.runs < 2 or sluice.runs < 2:
        return "one run each: no estimate of noise (use --rounds 3 or more)"
    if sluice.most < sort.least:
        return "Sluice lower in every run"
    if sluice.least > sort.most:
        return "Sluice higher in every run"
    return NO_DIFFERENCE


def order(rounds: int) -> List[Tuple[int, str]]:
    """The runs in order: each round both contenders, the first alternating (sort first in round 1)."""
    if rounds < 1:
        raise ValueError(f"--rounds must be at least 1, got {rounds}")
    return [(r, c) for r in range(1, rounds + 1) for c in (CONTENDERS if r % 2 else CONTENDERS[::-1])]


def event_log_conf(directory: Path) -> List[str]:
    """spark-submit arguments that write one uncompressed event log into ``directory``."""
    settings = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": directory.absolute().as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }
    return [arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")]


def run_command(
    spark_submit: str, contender: str, sluice_conf: Dict[str, str], user_args: Sequence[str], events: Path
) -> List[str]:
    """The spark-submit command line of one run: the user's arguments with the event log's settings,
    and Sluice's (merged as ``sluice submit`` merges them) or the sort shuffle."""
    options, application = split(user_args)
    given = [arg for option in options for arg in option.given] + event_log_conf(events)
    if contender == "sluice":
        return submit_command(spark_submit, sluice_conf, given + application)
    return [spark_submit, *given, "--conf", "spark.shuffle.manager=sort", *application]


def run_once(command: List[str], env: Dict[str, str], directory: Path, timeout: float) -> Tuple[float, Path, int]:
    """Runs one spark-submit; its exit status, wall seconds and log."""
    log = directory / "spark-submit.log"
    started = time.monotonic()
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            code = -1
    return time.monotonic() - started, log, code


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def compare_runs(runs: Sequence[Run]) -> Dict[str, Any]:
    """Per figure (in total, and per job when every run ran the same jobs) each contender's spread,
    the ratio of the medians (Sluice / sort) and the verdict."""

    def table(figures: Dict[str, List[eventlog.Figures]]) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for name in eventlog.FIGURES:
            sort = spread([f.get(name) for f in figures["sort"]])
            sluice = spread([f.get(name) for f in figures["sluice"]])
            ratio = sluice.median / sort.median if sort.median else None
            out[name] = {
                "sort": asdict(sort),
                "sluice": asdict(sluice),
                "ratio": ratio,
                "verdict": verdict(sort, sluice),
            }
        return out

    apps = {c: [r.application for r in runs if r.contender == c and r.application] for c in CONTENDERS}
    result: Dict[str, Any] = {"total": table({c: [a.total for a in apps[c]] for c in CONTENDERS}), "jobs": []}
    signatures = {tuple(j.name for j in a.jobs) for c in CONTENDERS for a in apps[c]}
    if len(signatures) == 1:
        names = next(iter(signatures))
        for i, name in enumerate(names):
            figures = {c: [a.jobs[i].figures for a in apps[c]] for c in CONTENDERS}
            result["jobs"].append({"job": i, "name": name, **table(figures)})
    else:
        result["jobs_differ"] = True
    return result


def _show(name: str, value: float) -> str:
    if name == "shuffle_bytes":
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size:
                return f"{value / size:.1f} {unit}"
        return f"{value:.0f} B"
    return f"{value:.1f} s"


def report(result: Dict[str, Any], rounds: int, application: str) -> List[str]:
    """The comparison as the lines ``sluice compare`` prints."""
    lines = [
        f"sluice compare: {application}, {rounds} round{'s' if rounds != 1 else ''} of each shuffle, alternating",
        f"{'':<16}{'sort shuffle: median (least-most)':>36}{'Sluice: median (least-most)':>36}"
        f"{'Sluice/sort':>13}  verdict",
    ]

    def block(title: str, figures: Dict[str, Any]) -> None:
        lines.append(title)
        for name in eventlog.FIGURES:
            f = figures[name]
            cells = []
            for c in CONTENDERS:
                s = f[c]
                cells.append(f"{_show(name, s['median'])} ({_show(name, s['least'])}-{_show(name, s['most'])})")
            ratio = "n/a" if f["ratio"] is None else f"{f['ratio']:.2f}"
            lines.append(f"  {FIGURE_LABELS[name]:<14}{cells[0]:>36}{cells[1]:>36}{ratio:>13}  {f['verdict']}")

    block("application", result["total"])
    for job in result["jobs"]:
        block(f"job {job['job']}: {job['name']}", job)
    if result.get("jobs_differ"):
        lines.append("(the runs ran different jobs, as adaptive query execution or the data may decide: totals only)")
    wall = result["total"]["wall_s"]
    if wall["verdict"] == NO_DIFFERENCE:
        lines.append(f"verdict: {NO_DIFFERENCE} in the application's wall time: the runs' spread covers the gap.")
    elif wall["ratio"] is not None and wall["verdict"].startswith("Sluice"):
        lines.append(f"verdict: Sluice took {wall['ratio']:.2f} of the sort shuffle's wall time ({wall['verdict']}).")
    else:
        lines.append(f"verdict: {wall['verdict']}.")
    lines.append(
        "Executor CPU is Spark's task CPU time: it leaves out both shuffles' network threads. Shuffle bytes are "
        "as written (each shuffle's own format)."
    )
    return lines


def main(args: Sequence[str], spark_submit: str, environ: Optional[Dict[str, str]] = None) -> int:
    from sluice.cli import PORT_HINT, sluice_conf, with_negative_values

    env_in = dict(os.environ if environ is None else environ)
    args = list(args)
    if "--" not in args and any(a in ("-h", "--help") for a in args):
        parser().print_help()
        return 0
    if "--" not in args:
        parser().print_usage(sys.stderr)
        raise SystemExit("sluice compare: put -- before spark-submit's arguments and the application")
    cut = args.index("--")
    own, user_args = args[:cut], args[cut + 1 :]
    if any(a.partition("=")[0] == "--port" for a in own):
        raise SystemExit(f"sluice compare: {PORT_HINT}")
    parsed = parser().parse_args(with_negative_values(own))
    application = split(user_args)[1]
    if not application:
        raise SystemExit("sluice compare: no application after --: give spark-submit's options and app.py")
    if deploy_mode(user_args, env_in) == "cluster":
        raise SystemExit(
            "sluice compare: reads each run's event log on this machine, so the driver must run here: use "
            "--deploy-mode client"
        )
    try:
        plan = order(parsed.rounds)
    except ValueError as e:
        raise SystemExit(f"sluice compare: {e}") from None
    conf = sluice_conf(parsed, "compare")
    out = parsed.out or Path(tempfile.mkdtemp(prefix="sluice-compare-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"sluice compare: {len(plan)} runs of {application[0]}; logs and event logs in {out}", flush=True)
    runs: List[Run] = []
    for round_number, contender in plan:
        directory = out / f"round{round_number}-{contender}"
        events = directory / "events"
        events.mkdir(parents=True, exist_ok=True)
        command = run_command(spark_submit, contender, conf, user_args, events)
        env = submit_environment(env_in, command[1:])
        print(f"  round {round_number}: {LABELS[contender]} ...", end="", flush=True)
        seconds, log, code = run_once(command, env, directory, parsed.timeout)
        if code != 0:
            print(" failed", flush=True)
            why = f"took longer than {parsed.timeout:.0f} s" if code == -1 else f"exited with {code}"
            raise SystemExit(
                f"sluice compare: the {LABELS[contender]} run of round {round_number} {why}; its log, {log}, "
                f"ends:\n{tail(log)}"
            )
        try:
            app = eventlog.read(eventlog.find(events))
        except eventlog.EventLogError as e:
            raise SystemExit(f"sluice compare: {e} (the run's log: {log})") from None
        print(f" {seconds:.1f} s", flush=True)
        runs.append(Run(round_number, contender, seconds, str(log), app))
    result = compare_runs(runs)
    for line in report(result, parsed.rounds, Path(application[0]).name):
        print(line)
    if parsed.json is not None:
        parsed.json.write_text(
            json.dumps({"rounds": parsed.rounds, "runs": [asdict(r) for r in runs], "comparison": result}, indent=2)
        )
    return 0
