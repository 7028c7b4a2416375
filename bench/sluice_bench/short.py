"""``sluice bench batch --short``: short queries, where a shuffle's fixed costs (set-up, the first
read of a channel, round trips, timers) are most of its time. TPC-H at a small scale factor
(default 0.1) and single small shuffles (``jobs_short``), through Sluice and through the sort
shuffle, on ``local-cluster[2,1,...]`` in each of batch's settings.

Short jobs are too short to compare across applications run one after the other: a shared
machine's load changes more between two applications than Sluice changes a short job. So both
contenders' applications run at the same time and take turns job by job (who goes first
alternates by round); the idle one waits. Each job's median over the rounds, per contender, and
the Sluice / sort ratio, with a breakdown of where the time went: outside any stage (planning,
the driver between stages), inside stages, and Spark's task metrics summed over the job's tasks
(executor run time, task deserialisation, shuffle fetch wait, shuffle write time, GC). Every
Sluice answer is checked against the sort shuffle's of the same round.

With ``--cold`` each round instead starts a fresh application per contender (one after the
other, alternated) and times its first jobs, once its executors are up: what a short
``spark-submit`` pays, where nothing of either shuffle is warm yet (classes, JIT, connections).

Goals (issue "no floor"): no single TPC-H query above 1.10 of the sort shuffle's time, and the
TPC-H total at most 0.85 of it.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from sluice_bench import charts, tpch
from sluice_bench.apps import LOG_DIR, run_app, run_apps_together, run_plan
from sluice_bench.args import sluice_options
from sluice_bench.compare import difference
from sluice_bench.results import Recorder, command_line, save_result, subtitle_of
from sluice_bench.stats import alternation, goal, median, ratio

CONTENDERS = ("sluice", "sort")
NAME = "batch-short"
COLD_NAME = "batch-short-cold"
SCALE = 0.1
QUICK_SCALE = 0.01
QUICK_QUERIES = (1, 6)
# The single small shuffles (sluice_bench.jobs_short.small_shuffles).
SHUFFLES = ("repartition_1k", "group_by_100k")
ROUNDS = 5
# --cold: the executors an application waits for before its first timed job.
COLD_EXECUTORS = 2
QUERY_GOAL = 1.10
TOTAL_GOAL = 0.85
# Where a job's time went: its wall-clock split (seconds) and Spark's task metrics (summed over its tasks).
PHASES = (
    "outside_stages_s",
    "in_stages_s",
    "executor_run_ms",
    "executor_deserialize_ms",
    "shuffle_fetch_wait_ms",
    "shuffle_write_time_ns",
    "jvm_gc_ms",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--short",
        action="store_true",
        help=f"run the short queries instead (TPC-H at --short-scale and small shuffles, the contenders taking "
        f"turns job by job; default {ROUNDS} rounds) into {NAME}.json",
    )
    parser.add_argument("--short-scale", type=float, help=f"TPC-H scale factor of --short (default {SCALE})")
    parser.add_argument(
        "--cold",
        action="store_true",
        help=f"with --short: time the first jobs of fresh applications instead (one per contender and round, "
        f"alternated, no warm-up) into {COLD_NAME}.json",
    )


def jobs_of(args: argparse.Namespace) -> Tuple[List[int], List[str]]:
    """The TPC-H queries and all the job names of a ``--short`` run."""
    if args.no_tpch:
        queries: List[int] = []
    elif args.queries:
        queries = [int(q) for q in args.queries.split(",")]
    else:
        queries = list(QUICK_QUERIES) if args.quick else sorted(tpch.QUERIES)
    return queries, [*SHUFFLES, *(f"q{q}" for q in queries)]


def turn_order(jobs: List[str], rounds: int) -> List[List[str]]:
    """Every job of every round once per contender, ``[contender, "JOB#ROUND"]``; within a round
    the same contender goes first for every job, and the other one in the next round."""
    order: List[List[str]] = []
    for r in range(1, rounds + 1):
        first = CONTENDERS if r % 2 == 1 else CONTENDERS[::-1]
        for job in jobs:
            order += [[c, f"{job}#{r}"] for c in first]
    return order


def run(args: argparse.Namespace, settings: Dict[str, Dict[str, Any]], argv: Optional[List[str]] = None) -> int:
    """Runs the short queries in each of ``settings`` (batch's, by name: ``label`` and ``conf``)."""
    rounds = args.rounds or (1 if args.quick else ROUNDS)
    scale = args.short_scale or (QUICK_SCALE if args.quick else SCALE)
    queries, jobs = jobs_of(args)
    data_dir = tpch.default_data_dir(scale)
    if queries:
        tpch.ensure_data(data_dir, scale)
    cold = bool(getattr(args, "cold", False))
    name = COLD_NAME if cold else NAME
    recorder = Recorder(
        name,
        command_line(argv),
        {"rounds": rounds, "quick": bool(args.quick), "settings": list(settings), "scale": scale, "jobs": jobs},
    )
    if cold:
        recorder.notes.append("a fresh application per contender and round, one after the other; no warm-up")
    else:
        recorder.notes.append("both contenders' applications ran at the same time, taking turns job by job")
    results: Dict[str, Dict[str, List[Dict[str, Any]]]] = {}

    def spec_of(setting: str, **extra: Any) -> Dict[str, Any]:
        return {
            "master": f"local-cluster[2,1,{args.memory}]",
            "conf": {"spark.driver.memory": "1g", **settings[setting]["conf"]},
            "sluice_options": sluice_options(args),
            "tpch": {"data_dir": str(data_dir), "queries": queries} if queries else None,
            "shuffles": True,
            **extra,
        }

    def record(setting: str, runs: Dict[str, List[Dict[str, Any]]]) -> None:
        results[setting] = runs
        recorder.runs += [
            {k: v for k, v in r.items() if k != "answer"} | {"contender": c, "setting": setting}
            for c in CONTENDERS
            for r in runs[c]
        ]

    def fresh(setting: str) -> None:
        spec = spec_of(setting, executors=COLD_EXECUTORS)
        runs: Dict[str, List[Dict[str, Any]]] = {c: [] for c in CONTENDERS}
        for round_number, contender in alternation(CONTENDERS, rounds):
            app = run_app("cold", contender, spec, timeout=3600, log_dir=LOG_DIR)
            runs[contender] += [dict(r, round=round_number) for r in app["runs"]]
        record(setting, runs)

    def one(setting: str) -> None:
        with tempfile.TemporaryDirectory(prefix="sluice-bench-turns-") as turns:
            spec = spec_of(setting, turns={"dir": turns, "order": turn_order(jobs, rounds), "timeout_s": 1800})
            apps = run_apps_together("short", {c: spec for c in CONTENDERS}, timeout=4 * 3600, log_dir=LOG_DIR)
        record(setting, {c: apps[c]["runs"] for c in CONTENDERS})

    saved: List[Tuple[Path, Path]] = []

    def one_and_save(setting: str) -> None:
        (fresh if cold else one)(setting)
        # Saved after every setting, so a run stopped later keeps the settings it finished.
        saved[:] = [save(recorder, results, settings, jobs, args.out, name)]

    how = "fresh applications, alternated" if cold else "both contenders, taking turns"
    run_plan(list(settings), "bench batch --short", lambda s: f"{s}: {how}", one_and_save)
    path, chart = saved[0]
    print_summary(recorder, path, chart)
    if recorder.mismatches:
        print("\nANSWER MISMATCHES: Sluice's answers differ from the sort shuffle's; the timings are void:")
        for m in recorder.mismatches:
            print("  " + m)
        return 1
    return 0


def save(
    recorder: Recorder,
    results: Dict[str, Dict[str, List[Dict[str, Any]]]],
    settings: Dict[str, Dict[str, Any]],
    jobs: List[str],
    out: str,
    result_name: str = NAME,
) -> Tuple[Path, Path]:
    """Summarizes the settings run so far (``results``) into ``recorder`` and saves it."""
    recorder.mismatches[:] = [f"{name}: {m}" for name in results for m in mismatches(results[name])]
    recorder.summary["settings"] = {}
    recorder.goals[:] = []
    for name in results:
        label = settings[name]["label"]
        s = summarize(results[name], jobs)
        recorder.summary["settings"][name] = dict(s, label=label)
        recorder.goals += goals_of(s, label)
    return save_result(recorder, out, result_name, draw)


def mismatches(results: Dict[str, List[Dict[str, Any]]]) -> List[str]:
    """Every Sluice answer against the sort shuffle's answer of the same job and round."""
    expected = {(r["job"], r["round"]): r["answer"] for r in results["sort"]}
    out: List[str] = []
    for r in results["sluice"]:
        key = (r["job"], r["round"])
        if key not in expected:
            out.append(f"round {r['round']}, {r['job']}: no sort shuffle answer")
            continue
        diff = difference(expected[key], r["answer"])
        if diff:
            out.append(f"round {r['round']}, {r['job']}: {diff}")
    return out


def summarize(results: Dict[str, List[Dict[str, Any]]], jobs: List[str]) -> Dict[str, Any]:
    """Per job: each contender's median seconds and phases, and the Sluice / sort ratio; totals of
    the TPC-H queries and of the small shuffles (medians of the per-round sums)."""
    per_job: Dict[str, Any] = {}
    for job in jobs:
        runs = {c: [r for r in results[c] if r["job"] == job] for c in CONTENDERS}
        entry: Dict[str, Any] = {f"{c}_s": median([r["seconds"] for r in runs[c]]) for c in CONTENDERS}
        entry["ratio"] = ratio(entry["sluice_s"], entry["sort_s"])
        for c in CONTENDERS:
            entry[f"{c}_phases"] = {p: median([float(r.get(p, 0)) for r in runs[c]]) for p in PHASES}
        per_job[job] = entry
    out: Dict[str, Any] = {"jobs": per_job}
    for group, names in (("tpch", [j for j in jobs if j.startswith("q")]), ("shuffles", list(SHUFFLES))):
        if not names:
            continue
        totals = {}
        for c in CONTENDERS:
            by_round: Dict[int, float] = {}
            for r in results[c]:
                if r["job"] in names:
                    by_round[r["round"]] = by_round.get(r["round"], 0.0) + float(r["seconds"])
            totals[c] = median(list(by_round.values()))
        out[f"{group}_total"] = totals
        out[f"{group}_ratio"] = ratio(totals["sluice"], totals["sort"])
    queries = {j: v["ratio"] for j, v in per_job.items() if j.startswith("q")}
    if queries:
        slowest = max(queries, key=lambda j: queries[j])
        out["slowest_query"] = {"job": slowest, "ratio": queries[slowest]}
    return out


def goals_of(s: Dict[str, Any], label: str) -> List[Dict[str, Any]]:
    goals: List[Dict[str, Any]] = []
    if "slowest_query" in s:
        q = s["slowest_query"]
        goals.append(
            goal(
                f"{label}: slowest short TPC-H query ({q['job']}), Sluice / sort", q["ratio"], QUERY_GOAL, at_most=True
            )
        )
        goals.append(goal(f"{label}: short TPC-H total, Sluice / sort", s["tpch_ratio"], TOTAL_GOAL, at_most=True))
    return goals


def draw(path: Path, result: Dict[str, Any]) -> Path:
    """The chart of a result (also from a saved JSON: ``sluice bench batch --short --replot``):
    per setting, every job's Sluice / sort ratio of median times."""
    panels = [
        charts.BatchPanel(
            title=f"{s.get('label', '')}, TPC-H SF {result['settings'].get('scale', '?')} and small shuffles",
            heavy=None,
            queries={j: v["ratio"] for j, v in s["jobs"].items()},
            total_ratio=s.get("tpch_ratio"),
        )
        for s in result["summary"].get("settings", {}).values()
    ]
    return charts.batch_chart(path, panels, subtitle_of(result))


def print_summary(recorder: Recorder, path: Path, chart: Path) -> None:
    for s in recorder.summary.get("settings", {}).values():
        print(f"\n== short queries, {s['label']} ==")
        print(f"{'job':>15} {'sluice s':>9} {'sort s':>8} {'ratio':>6}  outside stages s   fetch wait ms   run ms")
        for job, v in s["jobs"].items():
            a, b = v["sluice_phases"], v["sort_phases"]
            print(
                f"{job:>15} {v['sluice_s']:>9.3f} {v['sort_s']:>8.3f} {v['ratio']:>6.2f}  "
                f"{a['outside_stages_s']:>6.3f} /{b['outside_stages_s']:>6.3f}  "
                f"{a['shuffle_fetch_wait_ms']:>6.0f} /{b['shuffle_fetch_wait_ms']:>5.0f}  "
                f"{a['executor_run_ms']:>6.0f} /{b['executor_run_ms']:>6.0f}"
            )
        for group in ("tpch", "shuffles"):
            if f"{group}_total" in s:
                t = s[f"{group}_total"]
                print(
                    f"{group} total: Sluice {t['sluice']:.2f}s, sort {t['sort']:.2f}s, ratio {s[group + '_ratio']:.2f}"
                )
    for g in recorder.goals:
        print(f"goal {g['goal']} <= {g['target']}: {g['value']:.2f} -> {'met' if g['met'] else 'MISSED'}")
    print(f"result: {path}\nchart: {chart}")
