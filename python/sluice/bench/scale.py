"""``sluice bench scale``: how the cost grows with the work, Sluice against the sort shuffle on
``local-cluster[2,1,...]``: the data ×1, ×4 and ×16 (16 map × 16 reduce partitions), and the
partitions from 10 × 10 to 200 × 200 (data ×1). While Sluice's jobs run, the established TCP
connections between the executors' Sluice ports are counted from /proc: Flink multiplexes every
channel between two executors over one connection, so the goal is exactly one per executor
pair (and direction), whatever the partitions.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, List, Optional

from sluice.bench import charts
from sluice.bench._common import (
    Recorder,
    command_line,
    goal,
    median,
    ratio,
    run_alternating_apps,
    save_result,
    sluice_options,
    subtitle_of,
)
from sluice.bench.compare import difference

BASE_ROWS = 500_000
QUICK_BASE_ROWS = 20_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-rows", type=int, help=f"rows at size x1 (default {BASE_ROWS:,}; quick {QUICK_BASE_ROWS:,})")
    parser.add_argument("--memory", default="2048", help="executor memory in MiB (local-cluster[2,1,MEM])")


def configs(base: int, quick: bool) -> List[Dict[str, Any]]:
    sizes = (1, 4) if quick else (1, 4, 16)
    parts = (10, 50) if quick else (10, 50, 200)
    out = [{"name": f"size x{s}", "rows": base * s, "maps": 16, "reduces": 16} for s in sizes]
    out += [{"name": f"parts {p}x{p}", "rows": base, "maps": p, "reduces": p} for p in parts]
    return out


def run(args: argparse.Namespace, argv: Optional[List[str]] = None) -> int:
    quick = bool(args.quick)
    rounds = args.rounds or (1 if quick else 2)
    base = args.base_rows or (QUICK_BASE_ROWS if quick else BASE_ROWS)
    spec: Dict[str, Any] = {
        "master": f"local-cluster[2,1,{args.memory}]",
        "conf": {"spark.sql.adaptive.enabled": "false"},
        "sluice_options": sluice_options(args),
        "configs": configs(base, quick),
    }
    recorder = Recorder("scale", command_line(argv), {"rounds": rounds, "quick": quick, "spec": spec})
    run_alternating_apps(recorder, "scale", spec, rounds, timeout=7200)
    summarize(recorder, spec["configs"])
    path, chart = save_result(recorder, args.out, "scale", draw)
    print_summary(recorder, path, chart)
    return 1 if recorder.mismatches else 0


def draw(path: Path, result: Dict[str, Any]) -> Path:
    """The chart of a result (also from a saved JSON: ``sluice bench scale --replot``)."""
    groups = {name: {"sluice": v["sluice_s"], "sort": v["sort_s"]} for name, v in result["summary"]["configs"].items()}
    return charts.scale_chart(path, groups, subtitle_of(result))


def summarize(recorder: Recorder, config_list: List[Dict[str, Any]]) -> None:
    s: Dict[str, Any] = {}
    for c in config_list:
        name = c["name"]
        times = {k: median([r["runs"][name]["seconds"] for r in recorder.runs if r["contender"] == k]) for k in ("sluice", "sort")}
        s[name] = {"sluice_s": times["sluice"], "sort_s": times["sort"], "ratio": ratio(times["sluice"], times["sort"]),
                   "rows": c["rows"], "maps": c["maps"], "reduces": c["reduces"],
                   "sort_shuffle_write_bytes": median([r["runs"][name]["shuffle_write_bytes"]
                                                       for r in recorder.runs if r["contender"] == "sort"])}
    for prefix in ("size", "parts"):
        names = [c["name"] for c in config_list if c["name"].startswith(prefix)]
        if names:
            first = s[names[0]]
            for n in names:
                s[n]["growth_sluice"] = ratio(s[n]["sluice_s"], first["sluice_s"])
                s[n]["growth_sort"] = ratio(s[n]["sort_s"], first["sort_s"])
    recorder.summary["configs"] = s
    # Connections per executor pair, the most seen in any sample of any Sluice run.
    seen: Dict[str, int] = {}
    for r in recorder.runs:
        for name, run in r["runs"].items():
            for pair, n in run.get("connections", {}).items():
                seen[f"{name}: {pair}"] = max(seen.get(f"{name}: {pair}", 0), int(n))
    recorder.summary["connections"] = seen
    most = max(seen.values(), default=0)
    recorder.summary["max_connections_per_pair"] = most
    if not seen:
        recorder.notes.append("no Sluice connection was seen (no executor reported a Sluice port)")
    recorder.goals.append(goal("TCP connections per executor pair and direction (most seen)", float(most), 1.0, at_most=True))
    # Every Sluice answer against the sort shuffle's of the same round.
    for sluice_run, sort_run in zip([r for r in recorder.runs if r["contender"] == "sluice"],
                                    [r for r in recorder.runs if r["contender"] == "sort"]):
        for name, run in sluice_run["runs"].items():
            diff = difference(sort_run["runs"][name]["answer"], run["answer"])
            if diff:
                recorder.mismatches.append(f"round {sluice_run['round']}, {name}: {diff}")


def print_summary(recorder: Recorder, path: Path, chart: Path) -> None:
    print(f"\n{'config':<16}{'rows':>11}{'sluice s':>10}{'sort s':>9}{'ratio':>7}{'growth sluice':>15}{'growth sort':>13}")
    for name, v in recorder.summary["configs"].items():
        print(f"{name:<16}{v['rows']:>11,}{v['sluice_s']:>10.2f}{v['sort_s']:>9.2f}{v['ratio']:>7.2f}"
              f"{v.get('growth_sluice', float('nan')):>15.2f}{v.get('growth_sort', float('nan')):>13.2f}")
    print(f"most TCP connections per executor pair (one direction): {recorder.summary['max_connections_per_pair']}")
    for g in recorder.goals:
        print(f"goal {g['goal']} <= {g['target']}: {g['value']:.2f} -> {'met' if g['met'] else 'MISSED'}")
    for m in recorder.mismatches:
        print("MISMATCH: " + m)
    print(f"result: {path}\nchart: {chart}")
