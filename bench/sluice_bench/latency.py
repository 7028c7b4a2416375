"""``sluice bench latency``: end-to-end latency of a Real-Time Mode stateful query
(``groupBy(key).count()`` over a pipelined shuffle with two partitions, on
``local-cluster[2,2,...]``) at fixed input rates, through Sluice's pipelined shuffle and through
Spark's built-in streaming shuffle, alternated, at equal flush intervals (Sluice's buffer timeout
= the built-in's ``networkBufferMaxWaitTimeMs``) and with each one's defaults.

Latency is measured in the JVM (see ``jobs_streaming``): ``e2e`` from a record's scheduled
creation to its output row in the sink, ``shuffle`` from a stamp taken on the map side just
before the shuffle. Sluice's own latency markers (time spent in the network stack) are
reported too.

Two sources (``--source``): ``scheduled`` generates evenly spaced records on the executors (an
open-loop source that shows falling behind as latency); ``driver`` feeds Spark's
``LowLatencyMemoryStream`` from the driver, as a new user would try it, whose records arrive in
small bursts (its result is saved as ``latency-driver``).

Goals: Sluice's p99 through the shuffle at most a quarter of the built-in's at the same
interval; at low load (the lowest rate) Sluice's p99 through the shuffle at most the buffer
timeout + 1 ms. End to end includes the source's own delays (the driver-fed source polls the
driver every 10 ms when it finds nothing), the same for both, so the goals and the chart use the
latency through the shuffle.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from sluice_bench import charts
from sluice_bench.apps import LOG_DIR, run_app, run_plan
from sluice_bench.args import sluice_options
from sluice_bench.results import Recorder, command_line, save_result, subtitle_of
from sluice_bench.stats import alternation, goal, median, ratio

RATES = (1000, 10000, 50000)
QUICK_RATES = (1000, 5000)
# The driver-fed source fetches every record from the driver by RPC; it cannot feed 10,000/s.
DRIVER_RATES = (600,)
SLUICE_DEFAULT_MS = 100
BUILTIN_DEFAULT_MS = 50

# (name, Sluice's buffer timeout in ms or None for its default, the built-in's interval or None)
CONFIGS: Tuple[Tuple[str, Optional[int], Optional[int]], ...] = (
    ("both flush every 5 ms", 5, 5),
    ("both flush every 50 ms", 50, 50),
    ("defaults: Sluice 100 ms, built-in 50 ms", None, None),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rates", help="input rates in records/s (default 1000,10000,50000)")
    parser.add_argument("--measure-seconds", type=float, help="measured seconds per rate (default 20; quick 5)")
    parser.add_argument(
        "--contenders", default="sluice,builtin", help="which to run (default sluice,builtin; e.g. sluice alone)"
    )
    parser.add_argument("--memory", default="1024", help="executor memory in MiB (local-cluster[2,2,MEM])")
    parser.add_argument(
        "--pipelined-checksum",
        choices=("on", "off"),
        default="on",
        help="spark.shuffle.streaming.checksum.enabled for both contenders: a CRC32C with every network "
        "buffer (default on, as Spark)",
    )
    parser.add_argument(
        "--source",
        choices=("scheduled", "driver"),
        default="scheduled",
        help="scheduled: records generated on the executors, evenly spaced (default); driver: added on "
        "the driver to Spark's LowLatencyMemoryStream, which its readers fetch by RPC, so they arrive "
        f"in small bursts (default rate {DRIVER_RATES[0]}/s)",
    )


def app_spec(args: argparse.Namespace, sluice_ms: Optional[int], builtin_ms: Optional[int]) -> Dict[str, Any]:
    quick = bool(args.quick)
    source = source_of(args)
    defaults = DRIVER_RATES if source == "driver" else QUICK_RATES if quick else RATES
    rates = [int(r) for r in args.rates.split(",")] if args.rates else list(defaults)
    options: Dict[str, Any] = {"latency_tracking_interval": "50ms", **sluice_options(args)}
    if sluice_ms is not None:
        options["buffer_timeout"] = f"{sluice_ms}ms"
    builtin_conf: Dict[str, Any] = {"spark.shuffle.manager.incremental": "streaming"}
    if builtin_ms is not None:
        builtin_conf["spark.shuffle.streaming.networkBufferMaxWaitTimeMs"] = str(builtin_ms)
    warmup_s = 3 if quick else 5
    measure_s = args.measure_seconds or (5 if quick else 20)
    initial_warmup_s = 8 if quick else 15
    # One real-time batch spans the whole schedule: a batch boundary (the query stops its tasks
    # and starts the next batch's) would stall every record in flight for about a second and
    # land in whichever rate's window it falls.
    batch_s = int(initial_warmup_s + len(rates) * (warmup_s + measure_s) + 60)
    return {
        "master": f"local-cluster[2,2,{args.memory}]",
        "conf": {
            "spark.shuffle.streaming.checksum.enabled": "true"
            if getattr(args, "pipelined_checksum", "on") == "on"
            else "false",
            "spark.sql.shuffle.partitions": "2",
            # The map-side time stamp is a Scala UDF, which Real-Time Mode's allowlist does not list.
            "spark.sql.streaming.realTimeMode.allowlistCheck": "false",
        },
        "sluice_options": options,
        "builtin_conf": builtin_conf,
        "rates": rates,
        "warmup_s": warmup_s,
        "measure_s": measure_s,
        "initial_warmup_s": initial_warmup_s,
        "batch_duration": f"{batch_s} seconds",
        "keys": 1000,
        "partitions": 2,
        "source": source,
    }


def run(args: argparse.Namespace, argv: Optional[List[str]] = None) -> int:
    quick = bool(args.quick)
    rounds = args.rounds or (1 if quick else 3)
    # The driver-fed source runs at the equal 5 ms intervals only: the setting of the report it
    # reproduces, and of the goal.
    configs = CONFIGS[:1] if quick or source_of(args) == "driver" else CONFIGS
    specs = {name: app_spec(args, s, b) for name, s, b in configs}
    contenders = [c for c in ("sluice", "builtin") if c in getattr(args, "contenders", "sluice,builtin").split(",")]
    if not contenders:
        raise ValueError(f"--contenders {args.contenders!r}: name sluice, builtin or both")
    recorder = Recorder("latency", command_line(argv), {"rounds": rounds, "quick": quick, "specs": specs})
    plan = [
        (r, name, contender) for r, name in alternation([c[0] for c in configs], rounds) for contender in contenders
    ]

    def one(item: Tuple[int, str, str]) -> None:
        round_number, name, contender = item
        result = run_app("latency", contender, specs[name], timeout=1800, log_dir=LOG_DIR)
        result.update(round=round_number, config=name)
        recorder.runs.append(result)

    run_plan(plan, "bench latency", lambda i: f"round {i[0]}: {i[1]}: {i[2]}", one)
    summarize(recorder, configs)
    path, chart = save_result(recorder, args.out, result_name(args), draw)
    print_summary(recorder, path, chart)
    return 0


def source_of(args: argparse.Namespace) -> str:
    """``--source``: ``scheduled`` (also for callers that build their own arguments) or ``driver``."""
    return str(getattr(args, "source", "scheduled"))


def result_name(args: argparse.Namespace) -> str:
    """``latency``, or ``latency-driver`` for the driver-fed source."""
    return "latency" if source_of(args) == "scheduled" else "latency-driver"


def draw(path: Path, result: Dict[str, Any]) -> Path:
    """The chart of a result (also from a saved JSON: ``sluice bench latency --replot``)."""
    return charts.latency_chart(path, result["summary"]["table"], subtitle_of(result))


def summarize(recorder: Recorder, configs: Tuple[Tuple[str, Optional[int], Optional[int]], ...]) -> None:
    table: List[Dict[str, Any]] = []
    for name, sluice_ms, builtin_ms in configs:
        for contender in ("sluice", "builtin"):
            runs = [r for r in recorder.runs if r["config"] == name and r["contender"] == contender]
            rates = sorted({int(p["rate"]) for r in runs for p in r["phases"]})
            for rate in rates:
                phases = [p for r in runs for p in r["phases"] if int(p["rate"]) == rate]
                row: Dict[str, Any] = {
                    "config": name,
                    "contender": contender,
                    "rate": rate,
                    "interval_ms": (sluice_ms or SLUICE_DEFAULT_MS)
                    if contender == "sluice"
                    else (builtin_ms or BUILTIN_DEFAULT_MS),
                    "received_fraction": median([ratio(p["received"], p["scheduled"]) for p in phases]),
                }
                for stat in ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "p999_ms", "mean_ms"):
                    row[stat] = median([p["e2e"][stat] for p in phases if p["e2e"].get(stat) is not None])
                    row[f"shuffle_{stat}"] = median(
                        [p["shuffle"][stat] for p in phases if p["shuffle"].get(stat) is not None]
                    )
                table.append(row)
        markers = [
            r.get("network_latency", {}) for r in recorder.runs if r["config"] == name and r["contender"] == "sluice"
        ]
        p99s = [max(m["p99_ms"]) for m in markers if m.get("p99_ms")]
        recorder.summary.setdefault("sluice_network_marker_p99_ms", {})[name] = median(p99s)
    recorder.summary["table"] = table

    def cell(config: str, contender: str, rate: int) -> Optional[Dict[str, Any]]:
        found = [t for t in table if t["config"] == config and t["contender"] == contender and t["rate"] == rate]
        return found[0] if found else None

    ratios: Dict[str, Dict[str, float]] = {}
    for name, sluice_ms, builtin_ms in configs:
        for rate in sorted({t["rate"] for t in table if t["config"] == name}):
            s, b = cell(name, "sluice", rate), cell(name, "builtin", rate)
            if s is None or b is None:
                continue
            r = ratio(s["shuffle_p99_ms"], b["shuffle_p99_ms"])
            ratios.setdefault(name, {})[str(rate)] = r
            if sluice_ms is not None and sluice_ms == builtin_ms:
                recorder.goals.append(
                    goal(f"p99 through the shuffle, Sluice / built-in, {name}, {rate}/s", r, 0.25, at_most=True)
                )
        low = min((t["rate"] for t in table if t["config"] == name), default=None)
        s_low = cell(name, "sluice", low) if low is not None else None
        if s_low is not None:
            timeout = sluice_ms or SLUICE_DEFAULT_MS
            recorder.goals.append(
                goal(
                    f"low load ({low}/s): Sluice p99 through the shuffle, buffer timeout {timeout} ms",
                    s_low["shuffle_p99_ms"],
                    timeout + 1.0,
                    at_most=True,
                    unit="ms",
                )
            )
    recorder.summary["shuffle_p99_ratio_sluice_over_builtin"] = ratios


def print_summary(recorder: Recorder, path: Path, chart: Path) -> None:
    print(
        f"\n{'config':<42}{'contender':>9}{'rate/s':>8}{'p50':>9}{'p99':>9}{'p99.9':>10}"
        f"{'shuf p50':>10}{'shuf p99':>10}{'recv':>6}"
    )
    for t in recorder.summary["table"]:
        print(
            f"{t['config']:<42}{t['contender']:>9}{t['rate']:>8}{t['p50_ms']:>9.2f}{t['p99_ms']:>9.2f}"
            f"{t['p999_ms']:>10.2f}{t['shuffle_p50_ms']:>10.2f}{t['shuffle_p99_ms']:>10.2f}{t['received_fraction']:>6.2f}"
        )
    print("(milliseconds, medians over rounds; recv = rows received / scheduled)")
    for g in recorder.goals:
        sign = "<="
        print(f"goal {g['goal']} {sign} {g['target']}: {g['value']:.2f} -> {'met' if g['met'] else 'MISSED'}")
    print(f"result: {path}\nchart: {chart}")
