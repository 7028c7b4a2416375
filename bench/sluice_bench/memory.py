"""``sluice bench memory``: Sluice's peak network memory against its budget
(``network_memory``, 32 MiB by default here) while a shuffle about 20 times larger runs, on
``local-cluster[2,1,...]``, alternated with the sort shuffle running the same job (for its
time and its JVM direct memory, as context).

Per executor the probe reads Flink's UsedMemorySegments (sampled every millisecond), the
segments the NetworkBufferPool ever allocated (its exact high-water mark: segments are kept for
reuse) and the JVM's direct memory. Goal: never above the budget.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, List, Optional

from sluice_bench import charts
from sluice_bench.apps import run_alternating_apps
from sluice_bench.args import parse_size, sluice_options
from sluice_bench.results import Recorder, command_line, save_result, subtitle_of
from sluice_bench.stats import goal, median, ratio

MIB = 1 << 20
ROW_BYTES = 100  # about what one wide row takes in the shuffle (UnsafeRow with its frame)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--budget", default="32m", help="Sluice's network_memory per executor (default %(default)s)")
    parser.add_argument("--factor", type=float, default=20.0, help="shuffle size / budget (default %(default)s)")
    parser.add_argument("--memory", default="2048", help="executor memory in MiB (local-cluster[2,1,MEM])")


def run(args: argparse.Namespace, argv: Optional[List[str]] = None) -> int:
    quick = bool(args.quick)
    rounds = args.rounds or (1 if quick else 3)
    budget = parse_size(args.budget)
    rows = 300_000 if quick else int(args.factor * budget / ROW_BYTES)
    spec: Dict[str, Any] = {
        "master": f"local-cluster[2,1,{args.memory}]",
        "conf": {"spark.sql.adaptive.enabled": "false", "spark.executor.metrics.pollingInterval": "100ms"},
        "sluice_options": {**sluice_options(args), "network_memory": args.budget},
        "rows": rows,
        "partitions": 16,
    }
    recorder = Recorder(
        "memory", command_line(argv), {"rounds": rounds, "quick": quick, "budget_bytes": budget, "spec": spec}
    )
    run_alternating_apps(recorder, "memory", spec, rounds, timeout=3600)
    summarize(recorder, budget)
    path, chart = save_result(recorder, args.out, "memory", draw)
    print_summary(recorder, path, chart)
    return 1 if recorder.mismatches else 0


def draw(path: Path, result: Dict[str, Any]) -> Path:
    """The chart of a result (also from a saved JSON: ``sluice bench memory --replot``)."""
    s = result["summary"]
    budget = result["settings"]["budget_bytes"]
    return charts.memory_chart(
        path,
        {
            "Sluice: used segments\n(peak, 1 ms samples)": s["sluice_peak_used_bytes"] / MIB,
            "Sluice: segments allocated\n(high-water mark)": s["sluice_allocated_bytes"] / MIB,
            "Sluice: JVM direct\nmemory (peak)": s["peak_direct_bytes"]["sluice"] / MIB,
            "sort: JVM direct\nmemory (peak)": s["peak_direct_bytes"]["sort"] / MIB,
            "Sluice: Netty direct\nmemory (peak)": s["peak_netty_direct_bytes"]["sluice"] / MIB,
            "sort: Netty direct\nmemory (peak)": s["peak_netty_direct_bytes"]["sort"] / MIB,
        },
        budget / MIB,
        f"shuffle {s['shuffle_bytes'] / MIB:.0f} MiB = {s['shuffle_over_budget']:.0f}x the budget, "
        + subtitle_of(result),
    )


def summarize(recorder: Recorder, budget: int) -> None:
    s = recorder.summary
    sluice_runs = [r for r in recorder.runs if r["contender"] == "sluice"]
    sort_runs = [r for r in recorder.runs if r["contender"] == "sort"]
    peak_used = 0
    allocated = 0
    configured = 0
    for r in sluice_runs:
        for e in r["after"]:
            size = int(e["segment_size"])
            peak_used = max(peak_used, int(e["peak_used_segments"]) * size)
            allocated = max(allocated, int(e["allocated_segments"]) * size)
            configured = max(configured, int(e["total_segments"]) * size)
    s["sluice_peak_used_bytes"] = peak_used
    s["sluice_allocated_bytes"] = allocated
    s["sluice_configured_bytes"] = configured
    s["peak_direct_bytes"] = {
        c: max(
            (int(e["peak_direct_bytes"]) for r in recorder.runs if r["contender"] == c for e in r["after"]), default=0
        )
        for c in ("sluice", "sort")
    }
    s["peak_netty_direct_bytes"] = {
        c: max(
            (
                int(e.get("peak_netty_direct_bytes", 0))
                for r in recorder.runs
                if r["contender"] == c
                for e in r["after"]
            ),
            default=0,
        )
        for c in ("sluice", "sort")
    }
    s["seconds"] = {
        c: median([r["job"]["seconds"] for r in recorder.runs if r["contender"] == c]) for c in ("sluice", "sort")
    }
    s["time_ratio"] = ratio(s["seconds"]["sluice"], s["seconds"]["sort"])
    # The shuffle's size: what the sort shuffle wrote (compressed) and the rows' in-memory size.
    s["sort_shuffle_write_bytes"] = median([r["job"]["shuffle_write_bytes"] for r in sort_runs])
    rows = int(recorder.settings["spec"]["rows"])
    s["shuffle_bytes"] = max(s["sort_shuffle_write_bytes"], rows * ROW_BYTES)
    s["shuffle_over_budget"] = s["shuffle_bytes"] / budget
    answers = {repr(r["job"]["answer"]) for r in recorder.runs}
    if len(answers) != 1:
        recorder.mismatches.append(f"the memory job's answers differ between runs: {sorted(answers)}")
    recorder.goals.append(
        goal("Sluice's peak network memory / budget", max(peak_used, allocated) / budget, 1.0, at_most=True)
    )


def print_summary(recorder: Recorder, path: Path, chart: Path) -> None:
    s = recorder.summary
    budget = recorder.settings["budget_bytes"]
    print(
        f"\nbudget {budget / MIB:.0f} MiB per executor; shuffle {s['shuffle_bytes'] / MIB:.0f} MiB "
        f"({s['shuffle_over_budget']:.1f}x)"
    )
    print(
        f"Sluice peak used segments: {s['sluice_peak_used_bytes'] / MIB:.1f} MiB; allocated high-water: "
        f"{s['sluice_allocated_bytes'] / MIB:.1f} MiB;"
        f" JVM direct peak: {s['peak_direct_bytes']['sluice'] / MIB:.1f} MiB"
    )
    print(f"sort shuffle JVM direct peak: {s['peak_direct_bytes']['sort'] / MIB:.1f} MiB")
    print(
        f"Netty's own direct memory peak: Sluice {s['peak_netty_direct_bytes']['sluice'] / MIB:.1f} MiB, "
        f"sort {s['peak_netty_direct_bytes']['sort'] / MIB:.1f} MiB"
    )
    print(
        f"job time: Sluice {s['seconds']['sluice']:.1f}s,"
        f" sort {s['seconds']['sort']:.1f}s (ratio {s['time_ratio']:.2f})"
    )
    for g in recorder.goals:
        print(f"goal {g['goal']} <= {g['target']}: {g['value']:.2f} -> {'met' if g['met'] else 'MISSED'}")
    print(f"result: {path}\nchart: {chart}")
