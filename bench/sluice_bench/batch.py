"""``sluice bench batch``: a shuffle-heavy DataFrame job (about 1 GB of shuffle writes) and TPC-H
SF1's 22 queries, through Sluice and through Spark's sort shuffle, alternated over rounds on
``local-cluster[2,1,...]``, in two settings, each its own applications: AQE off with 64 shuffle
partitions (``off64``: both shuffle managers run the same plans), and Spark's defaults (``defaults``:
AQE on, 200 partitions), as a new user would run. Every Sluice answer is checked against the sort
shuffle's answer of the same round and setting; a few queries are also checked against DuckDB. Any
difference fails the run.

Besides the time, every job reports its executors' CPU: the user + system CPU seconds of the
executor processes (every thread: tasks, Sluice's network threads, GC, JIT; from
``/proc/PID/stat`` sampled before and after the job), per GB the sort shuffle wrote for that job
(Spark's shuffle write bytes, the median of the sort shuffle's runs; 1 GB = 1e9 bytes), the same
denominator for both, so the Sluice / sort ratio of CPU per GB is the ratio of the CPU seconds.
Spark's own task CPU time (``executorCpuTime``, which leaves out the network threads) is reported
beside it.

``--short`` runs short queries instead (see :mod:`sluice_bench.short`). ``--job sha2`` measures a
CPU-bound job instead of the heavy one (SHA-256 of every row on both sides of the shuffle, about
1.5 GB through the shuffle at its default rows): with ``--no-tpch`` it tells what Sluice's own threads
cost a job whose tasks want every core; its result is ``batch-sha2.json``.

``--service`` adds a third contender, ``sluice-service``: Sluice with its map outputs served by
its node shuffle service (``sluice shuffle-service``, one daemon on 127.0.0.1 for the whole run,
as one per node serves every application) instead of by the executors; its answers are checked
like Sluice's, and its times are reported against Sluice's own.

Goals, in each setting: heavy job and TPC-H total at most 0.80 of the sort shuffle's time;
executor CPU per GB shuffled at most 0.80 of the sort shuffle's; with ``--service``, each job
read through the service at most 1.05 of Sluice's executor-served time.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from sluice_bench import charts, short, tpch
from sluice_bench.apps import LOG_DIR, run_app, run_plan
from sluice_bench.args import HOST_LOCAL_HELP, host_local_conf, host_local_suffix, sluice_options, sort_conf
from sluice_bench.compare import difference, plain_rows
from sluice_bench.errors import BenchError
from sluice_bench.machine import load_average
from sluice_bench.results import Recorder, command_line, save_result, subtitle_of
from sluice_bench.service import SERVICE_CONTENDER, SERVICE_GOAL, NodeService, service_log
from sluice_bench.stats import goal, median, ratio, spread

CONTENDERS = ("sluice", "sort")
HEAVY_ROWS = 8_000_000  # about 1 GB of shuffle writes with the sort shuffle (lz4): 125 bytes a row
QUICK_HEAVY_ROWS = 200_000
# The sha2 job's rows: about 100 bytes a row before compression, so about 1.5 GB through the shuffle.
SHA2_ROWS = 15_000_000
DUCKDB_QUERIES = (1, 6)
GB = 1e9
# The settings a run compares in: what each adds to the applications' Spark configuration.
SETTINGS: Dict[str, Dict[str, Any]] = {
    "off64": {
        "label": "AQE off, 64 partitions",
        "conf": {"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "64"},
    },
    "defaults": {"label": "Spark's defaults (AQE on, 200 partitions)", "conf": {}},
}
TIME_GOAL = 0.80
CPU_GOAL = 0.80
METRICS = ("executor_run_ms", "shuffle_fetch_wait_ms", "shuffle_write_time_ns", "jvm_gc_ms", "tasks")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--heavy-rows", type=int, help=f"rows of the heavy job (default {HEAVY_ROWS:,}; quick {QUICK_HEAVY_ROWS:,})"
    )
    parser.add_argument("--scale", type=float, help="TPC-H scale factor (default 1; quick 0.01)")
    parser.add_argument("--queries", help="TPC-H queries to run, e.g. 1,3,6 (default all 22)")
    parser.add_argument("--no-heavy", action="store_true", help="skip the heavy job")
    parser.add_argument(
        "--job",
        choices=("heavy", "sha2"),
        default="heavy",
        help="the shuffle job measured beside TPC-H: heavy (group and join, about 1 GB) or sha2 (CPU-bound: "
        f"SHA-256 of every row before and after the shuffle, {SHA2_ROWS:,} rows by default)",
    )
    parser.add_argument(
        "--warm-up-rows",
        type=int,
        help="rows of the unmeasured warm-up run of the shuffle job (default a fiftieth of its rows): a larger "
        "warm-up lets the JIT compile each contender's per-buffer paths before the measured job",
    )
    parser.add_argument("--no-tpch", action="store_true", help="skip TPC-H")
    parser.add_argument("--no-duckdb", action="store_true", help="skip checking queries against DuckDB")
    parser.add_argument(
        "--duckdb-queries",
        default=",".join(str(q) for q in DUCKDB_QUERIES),
        help="queries whose sort-shuffle answers are checked against DuckDB (default %(default)s)",
    )
    parser.add_argument("--memory", default="3072", help="executor memory in MiB (local-cluster[2,1,MEM])")
    parser.add_argument(
        "--sort-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the sort shuffle's runs only, e.g. spark.shuffle.sort.bypassMergeThreshold=0 "
        "(a tuned sort shuffle); repeatable",
    )
    parser.add_argument(
        "--settings",
        default=",".join(SETTINGS),
        help="the settings to run, each in its own applications: off64 (AQE off, 64 shuffle partitions), "
        "defaults (Spark's: AQE on, 200 partitions); default %(default)s",
    )
    parser.add_argument(
        "--service",
        action="store_true",
        help="also run Sluice with its map outputs served by its node shuffle service (contender sluice-service, "
        "a sluice shuffle-service daemon started for the run), timed against Sluice's executor-served runs",
    )
    parser.add_argument("--host-local", action="store_true", help=HOST_LOCAL_HELP)
    short.add_arguments(parser)


def parse_settings(text: str) -> List[str]:
    names = [n.strip() for n in str(text).split(",") if n.strip()]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown or not names:
        raise BenchError(f"--settings takes some of {', '.join(SETTINGS)}, not {text!r}")
    return list(dict.fromkeys(names))


def spec_for(args: argparse.Namespace, setting: str = "off64") -> Dict[str, Any]:
    """The applications' spec in ``setting`` (one of :data:`SETTINGS`)."""
    quick = bool(args.quick)
    job = getattr(args, "job", "heavy")
    rows = args.heavy_rows or (QUICK_HEAVY_ROWS if quick else SHA2_ROWS if job == "sha2" else HEAVY_ROWS)
    scale = args.scale or (0.01 if quick else 1.0)
    queries = [int(q) for q in args.queries.split(",")] if args.queries else sorted(tpch.QUERIES)
    spec: Dict[str, Any] = {
        "master": f"local-cluster[2,1,{args.memory}]",
        "conf": {"spark.driver.memory": "2g", **SETTINGS[setting]["conf"], **host_local_conf(args)},
        "setting": setting,
        "sluice_options": sluice_options(args),
        # build_session applies these to the sort shuffle's runs only.
        "builtin_conf": sort_conf(args),
        "heavy": None
        if args.no_heavy
        else {"rows": rows, "partitions": 16, "job": job, "warm_rows": getattr(args, "warm_up_rows", None)},
        "tpch": None,
        "scale": scale,
    }
    if not args.no_tpch:
        data_dir = tpch.default_data_dir(scale)
        spec["tpch"] = {"data_dir": str(data_dir), "queries": queries}
    return spec


def result_name(args: argparse.Namespace) -> str:
    if not getattr(args, "short", False):
        name = ("batch-sha2" if getattr(args, "job", "heavy") == "sha2" else "batch") + host_local_suffix(args)
        # With the node service: beside, not over, the result without it.
        return f"{name}-service" if getattr(args, "service", False) else name
    return short.COLD_NAME if getattr(args, "cold", False) else short.NAME


def run(args: argparse.Namespace, argv: Optional[List[str]] = None) -> int:
    rounds = args.rounds or (1 if args.quick else 3)
    settings = parse_settings(getattr(args, "settings", ",".join(SETTINGS)))
    service = bool(getattr(args, "service", False))
    if getattr(args, "short", False):
        if service:
            raise BenchError("--service is not available with --short")
        return short.run(args, {name: SETTINGS[name] for name in settings}, argv)
    specs = {name: spec_for(args, name) for name in settings}
    first = specs[settings[0]]
    if first["tpch"] is not None:
        tpch.ensure_data(Path(first["tpch"]["data_dir"]), float(first["scale"]))
    contenders = (*CONTENDERS, SERVICE_CONTENDER) if service else CONTENDERS
    with NodeService(service_log(LOG_DIR, "batch")) if service else contextlib.nullcontext() as node:
        if node is not None:
            for spec in specs.values():
                spec["service_port"] = node.port
                spec["service_pid"] = node.pid
        recorder = Recorder(
            "batch",
            command_line(argv),
            {
                "rounds": rounds,
                "quick": bool(args.quick),
                "settings": settings,
                "contenders": list(contenders),
                "specs": specs,
            },
        )
        results = run_rounds(specs, settings, contenders, rounds, recorder)
        if node is not None:  # what it served (bytesSent), and that every application left it
            recorder.summary["service_status"] = node.status()
    return finish(args, specs, settings, results, recorder)


def run_rounds(
    specs: Dict[str, Dict[str, Any]],
    settings: List[str],
    contenders: Tuple[str, ...],
    rounds: int,
    recorder: Recorder,
) -> Dict[str, Dict[str, List[Dict[str, Any]]]]:
    """Every round runs every setting, each setting every contender in turn (A B A B ...), the
    machine's load average recorded before and after every application."""
    plan = [(r, name, c) for r in range(1, rounds + 1) for name in settings for c in contenders]
    results: Dict[str, Dict[str, List[Dict[str, Any]]]] = {n: {c: [] for c in contenders} for n in settings}

    def one(item: Tuple[int, str, str]) -> None:
        round_number, setting, contender = item
        load_before = load_average()
        result = run_app("batch", contender, specs[setting], timeout=4 * 3600, log_dir=LOG_DIR)
        result.update(round=round_number, setting=setting, load_before=load_before, load_after=load_average())
        results[setting][contender].append(result)
        recorder.runs.append(_without_answers(result))

    run_plan(plan, "bench batch", lambda i: f"round {i[0]}, {i[1]}: {i[2]}", one)
    return results


def finish(
    args: argparse.Namespace,
    specs: Dict[str, Dict[str, Any]],
    settings: List[str],
    results: Dict[str, Dict[str, List[Dict[str, Any]]]],
    recorder: Recorder,
) -> int:
    """Checks the answers, summarizes, writes the result and prints it; the exit code."""
    first = specs[settings[0]]
    checked = 0
    for name in settings:
        before = len(recorder.mismatches)
        check_answers(results[name], recorder)
        checked += int(recorder.summary["answers_checked"])
        recorder.mismatches[before:] = [f"{name}: {m}" for m in recorder.mismatches[before:]]
        if SERVICE_CONTENDER in results[name]:
            before = len(recorder.mismatches)
            check_answers({"sluice": results[name][SERVICE_CONTENDER], "sort": results[name]["sort"]}, recorder)
            checked += int(recorder.summary["answers_checked"])
            recorder.mismatches[before:] = [f"{name}, {SERVICE_CONTENDER}: {m}" for m in recorder.mismatches[before:]]
    recorder.summary["answers_checked"] = checked
    if first["tpch"] is not None and not args.no_duckdb:
        duck = [int(q) for q in args.duckdb_queries.split(",") if q.strip()]
        sort_answers = results[settings[0]]["sort"][0].get("tpch", {})
        check_duckdb(sort_answers, Path(first["tpch"]["data_dir"]), recorder, duck)
    summarize(results, recorder, specs)
    path, chart = save_result(recorder, args.out, result_name(args), draw)
    print_summary(recorder, path, chart)
    if recorder.mismatches:
        print("\nANSWER MISMATCHES: Sluice's answers differ from the reference; the timings are void:")
        for m in recorder.mismatches:
            print("  " + m)
        return 1
    return 0


def _without_answers(result: Dict[str, Any]) -> Dict[str, Any]:
    slim = dict(result)
    if "heavy" in slim:
        slim["heavy"] = {k: v for k, v in slim["heavy"].items() if k != "answer"} | {
            "answer": slim["heavy"].get("answer")
        }
    if "tpch" in slim:
        slim["tpch"] = {
            q: {k: v for k, v in r.items() if k != "answer"} | {"rows": len(r.get("answer") or [])}
            for q, r in slim["tpch"].items()
        }
    return slim


def check_answers(results: Dict[str, List[Dict[str, Any]]], recorder: Recorder) -> None:
    """Every Sluice answer against the sort shuffle's answer of the same round."""
    for sluice_run, sort_run in zip(results["sluice"], results["sort"]):
        r = sluice_run["round"]
        if "heavy" in sluice_run:
            diff = difference(sort_run["heavy"]["answer"], sluice_run["heavy"]["answer"])
            if diff:
                recorder.mismatches.append(f"round {r}, heavy job: {diff}")
        for q, expected in sort_run.get("tpch", {}).items():
            actual = sluice_run.get("tpch", {}).get(q)
            if actual is None:
                recorder.mismatches.append(f"round {r}, TPC-H Q{q}: no Sluice answer")
                continue
            diff = difference(expected["answer"], actual["answer"])
            if diff:
                recorder.mismatches.append(f"round {r}, TPC-H Q{q}: {diff}")
    checked = sum(len(r.get("tpch", {})) + ("heavy" in r) for r in results["sluice"])
    recorder.summary["answers_checked"] = checked


def check_duckdb(sort_answers: Dict[str, Any], data_dir: Path, recorder: Recorder, queries: List[int]) -> None:
    """A sanity check of the query texts: DuckDB's answers against the sort shuffle's."""
    try:
        import duckdb
    except ImportError:
        recorder.notes.append("DuckDB is not installed: the query texts were not checked against it")
        return
    con = duckdb.connect()
    for table in tpch.TABLES:
        con.execute(f"create view {table} as select * from read_parquet('{data_dir / (table + '.parquet')}')")
    checked: List[int] = []
    for q in queries:
        if str(q) not in sort_answers:
            continue
        rows = plain_rows([list(r) for r in con.execute(tpch.QUERIES[q]).fetchall()])
        diff = difference(rows, sort_answers[str(q)]["answer"])
        if diff:
            recorder.mismatches.append(f"TPC-H Q{q}: Spark (sort shuffle) differs from DuckDB: {diff}")
        checked.append(q)
    recorder.summary["duckdb_checked_queries"] = checked


def cpu_of(run: Dict[str, Any]) -> Optional[float]:
    """A job's executor process CPU seconds (None when the run could not read them)."""
    value = run.get("executor_process_cpu_s")
    return None if value is None else float(value)


def cpu_report(
    cpu: Dict[str, List[Optional[float]]], task_cpu_ns: Dict[str, List[float]], sort_bytes: float
) -> Dict[str, Any]:
    """Medians of each contender's executor process CPU seconds and Spark's task CPU seconds over
    its runs, both per GB the sort shuffle wrote (``sort_bytes``), and the Sluice / sort ratio of
    the process CPU per GB (the common denominator makes it the ratio of the CPU seconds)."""
    out: Dict[str, Any] = {"gb_shuffled": sort_bytes / GB}
    for c in CONTENDERS:
        process = median([v for v in cpu.get(c, []) if v is not None])
        task = median(task_cpu_ns.get(c, [])) / 1e9
        out[c] = {
            "process_cpu_s": process,
            "process_cpu_s_per_gb": ratio(process, sort_bytes / GB),
            "task_cpu_s": task,
            "task_cpu_s_per_gb": ratio(task, sort_bytes / GB),
        }
    out["ratio"] = ratio(out["sluice"]["process_cpu_s"], out["sort"]["process_cpu_s"])
    out["task_ratio"] = ratio(out["sluice"]["task_cpu_s"], out["sort"]["task_cpu_s"])
    return out


def time_and_cpu_goals(what: str, time_ratio: float, cpu_ratio: float) -> List[Dict[str, Any]]:
    """The two performance goals of a job: its time and its executor CPU per GB, Sluice / sort."""
    return [
        goal(f"{what}: Sluice time / sort time", time_ratio, TIME_GOAL, at_most=True),
        goal(f"{what}: executor CPU s per GB shuffled, Sluice / sort", cpu_ratio, CPU_GOAL, at_most=True),
    ]


def summarize(
    results: Dict[str, Dict[str, List[Dict[str, Any]]]], recorder: Recorder, specs: Dict[str, Dict[str, Any]]
) -> None:
    """Each setting's summary under ``summary["settings"][NAME]`` and its goals."""
    s = recorder.summary.setdefault("settings", {})
    for name, spec in specs.items():
        label = SETTINGS[name]["label"]
        summary, goals = summarize_setting(results[name], spec, label)
        s[name] = dict(summary, label=label)
        recorder.goals += goals


def summarize_setting(
    results: Dict[str, List[Dict[str, Any]]], spec: Dict[str, Any], label: str
) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    s: Dict[str, Any] = {}
    goals: List[Dict[str, Any]] = []
    if spec["heavy"] is not None:
        heavy = {c: spread([r["heavy"]["seconds"] for r in results[c]]) for c in CONTENDERS}
        s["heavy"] = heavy
        s["heavy_shuffle_write_bytes"] = {
            c: median([r["heavy"]["shuffle_write_bytes"] for r in results[c]]) for c in CONTENDERS
        }
        s["heavy_ratio"] = ratio(heavy["sluice"]["median"], heavy["sort"]["median"])
        s["job"] = job_name(spec)
        for metric in METRICS:
            s[f"heavy_{metric}"] = {c: median([r["heavy"].get(metric, 0) for r in results[c]]) for c in CONTENDERS}
        s["heavy_cpu"] = cpu_report(
            {c: [cpu_of(r["heavy"]) for r in results[c]] for c in CONTENDERS},
            {c: [r["heavy"].get("executor_cpu_ns", 0) for r in results[c]] for c in CONTENDERS},
            s["heavy_shuffle_write_bytes"]["sort"],
        )
        s["heavy_cpu_by_thread"] = {c: cpu_by_thread([r["heavy"] for r in results[c]]) for c in CONTENDERS}
        goals += time_and_cpu_goals(f"{label}: {job_name(spec)} job", s["heavy_ratio"], s["heavy_cpu"]["ratio"])
    if spec["tpch"] is not None:
        queries = [str(q) for q in spec["tpch"]["queries"]]
        per_query: Dict[str, Any] = {}
        for q in queries:
            times = {c: median([r["tpch"][q]["seconds"] for r in results[c]]) for c in CONTENDERS}
            shuffled = median([r["tpch"][q]["shuffle_write_bytes"] for r in results["sort"]])
            per_query[q] = {
                "sluice_s": times["sluice"],
                "sort_s": times["sort"],
                "ratio": ratio(times["sluice"], times["sort"]),
                "sort_shuffle_write_bytes": shuffled,
                "cpu": cpu_report(
                    {c: [cpu_of(r["tpch"][q]) for r in results[c]] for c in CONTENDERS},
                    {c: [r["tpch"][q].get("executor_cpu_ns", 0) for r in results[c]] for c in CONTENDERS},
                    shuffled,
                ),
            }
            for metric in METRICS:
                for c in CONTENDERS:
                    per_query[q][f"{c}_{metric}"] = median([r["tpch"][q].get(metric, 0) for r in results[c]])
        totals = {c: spread([sum(r["tpch"][q]["seconds"] for q in queries) for r in results[c]]) for c in CONTENDERS}
        s["tpch_queries"] = per_query
        s["tpch_total"] = totals
        s["tpch_ratio"] = ratio(totals["sluice"]["median"], totals["sort"]["median"])

        def total_cpu(r: Dict[str, Any]) -> Optional[float]:
            values = [cpu_of(r["tpch"][q]) for q in queries]
            return None if any(v is None for v in values) else sum(v or 0.0 for v in values)

        s["tpch_cpu"] = cpu_report(
            {c: [total_cpu(r) for r in results[c]] for c in CONTENDERS},
            {c: [sum(r["tpch"][q].get("executor_cpu_ns", 0) for q in queries) for r in results[c]] for c in CONTENDERS},
            sum(v["sort_shuffle_write_bytes"] for v in per_query.values()),
        )
        goals += time_and_cpu_goals(f"{label}: TPC-H total", s["tpch_ratio"], s["tpch_cpu"]["ratio"])
    if results.get(SERVICE_CONTENDER):
        service, service_goals = summarize_service(results, spec, label)
        s["service"] = service
        goals += service_goals
    return s, goals


def summarize_service(
    results: Dict[str, List[Dict[str, Any]]], spec: Dict[str, Any], label: str
) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """The ``sluice-service`` runs' times against Sluice's executor-served ones: the heavy job, each
    TPC-H query and the total, medians over rounds, and the goals on their ratios."""
    mine, theirs = results[SERVICE_CONTENDER], results["sluice"]
    s: Dict[str, Any] = {}
    goals: List[Dict[str, Any]] = []
    what = "read through the node service / executor-served time (Sluice)"
    if spec["heavy"] is not None:
        s["heavy"] = spread([r["heavy"]["seconds"] for r in mine])
        s["heavy_ratio"] = ratio(s["heavy"]["median"], median([r["heavy"]["seconds"] for r in theirs]))
        goals.append(goal(f"{label}: heavy job: {what}", s["heavy_ratio"], SERVICE_GOAL, at_most=True))
    if spec["tpch"] is not None:
        queries = [str(q) for q in spec["tpch"]["queries"]]
        s["tpch_queries"] = {
            q: {
                "service_s": median([r["tpch"][q]["seconds"] for r in mine]),
                "ratio": ratio(
                    median([r["tpch"][q]["seconds"] for r in mine]), median([r["tpch"][q]["seconds"] for r in theirs])
                ),
            }
            for q in queries
        }
        s["tpch_total"] = spread([sum(r["tpch"][q]["seconds"] for q in queries) for r in mine])
        s["tpch_ratio"] = ratio(
            s["tpch_total"]["median"], median([sum(r["tpch"][q]["seconds"] for q in queries) for r in theirs])
        )
        goals.append(goal(f"{label}: TPC-H total: {what}", s["tpch_ratio"], SERVICE_GOAL, at_most=True))
    return s, goals


def cpu_by_thread(runs: List[Dict[str, Any]]) -> Dict[str, float]:
    """The median CPU seconds of each kind of executor thread over ``runs`` (a kind missing from a
    run counts 0 there): where a contender's executor CPU went."""
    kinds = sorted({k for r in runs for k in r.get("executor_cpu_by_thread", {})})
    return {k: median([r.get("executor_cpu_by_thread", {}).get(k, 0.0) for r in runs]) for k in kinds}


def job_name(spec: Dict[str, Any]) -> str:
    """The measured shuffle job's name (``--job``): heavy or sha2."""
    return str((spec.get("heavy") or {}).get("job", "heavy"))


def setting_summaries(result: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """A result's summary per setting (a result saved before the settings existed: one, AQE off)."""
    s = result["summary"]
    if "settings" in s:
        settings: Dict[str, Dict[str, Any]] = s["settings"]
        return settings
    return {"off64": dict(s, label=SETTINGS["off64"]["label"])}


def draw(path: Path, result: Dict[str, Any]) -> Path:
    """The chart of a result (also from a saved JSON: ``sluice bench batch --replot``)."""
    if result.get("benchmark") == short.NAME:
        return short.draw(path, result)
    panels = []
    for s in setting_summaries(result).values():
        heavy = None
        if "heavy" in s:
            heavy = {c: (v["median"], v["min"], v["max"]) for c, v in s["heavy"].items()}
        queries = {f"Q{q}": v["ratio"] for q, v in s.get("tpch_queries", {}).items()}
        panels.append(
            charts.BatchPanel(
                title=str(s.get("label", "")),
                heavy=heavy,
                queries=queries,
                total_ratio=s.get("tpch_ratio"),
                heavy_cpu_ratio=(s.get("heavy_cpu") or {}).get("ratio"),
                tpch_cpu_ratio=(s.get("tpch_cpu") or {}).get("ratio"),
            )
        )
    return charts.batch_chart(path, panels, subtitle_of(result))


def _cpu_text(cpu: Optional[Dict[str, Any]]) -> str:
    if not cpu:
        return "executor CPU: not measured"
    return (
        f"executor CPU {cpu['sluice']['process_cpu_s']:.1f} / {cpu['sort']['process_cpu_s']:.1f} s "
        f"= {cpu['sluice']['process_cpu_s_per_gb']:.1f} / {cpu['sort']['process_cpu_s_per_gb']:.1f} s per GB "
        f"(Sluice / sort {cpu['ratio']:.2f}; task CPU {cpu['task_ratio']:.2f})"
    )


def print_summary(recorder: Recorder, path: Path, chart: Path) -> None:
    for s in recorder.summary.get("settings", {}).values():
        print(f"\n== {s['label']} ==")
        if "heavy" in s:
            h = s["heavy"]
            written = s["heavy_shuffle_write_bytes"]["sort"] / GB
            job = s.get("job", "heavy")
            print(
                f"{job} job: Sluice {h['sluice']['median']:.1f}s, sort {h['sort']['median']:.1f}s "
                f"(ratio {s['heavy_ratio']:.2f}; sort shuffle wrote {written:.2f} GB)"
            )
            print(f"{job} job: {_cpu_text(s.get('heavy_cpu'))}")
            by_thread = s.get("heavy_cpu_by_thread") or {}
            for kind in sorted({k for v in by_thread.values() for k in v}):
                sl, so = (by_thread.get(c, {}).get(kind, 0.0) for c in CONTENDERS)
                print(f"  executor CPU s, {kind:>15}: Sluice {sl:6.2f}, sort {so:6.2f}")
        if "tpch_queries" in s:
            columns = f"{'query':>6} {'sluice s':>9} {'sort s':>8} {'ratio':>6} {'sort MB':>8}"
            print(f"{columns} {'cpu s sl/sort':>14} {'cpu':>5}")
            for q, v in s["tpch_queries"].items():
                cpu = v["cpu"]
                print(
                    f"{'Q' + q:>6} {v['sluice_s']:>9.2f} {v['sort_s']:>8.2f} {v['ratio']:>6.2f} "
                    f"{v['sort_shuffle_write_bytes'] / 1e6:>8.1f} "
                    f"{cpu['sluice']['process_cpu_s']:>6.1f} /{cpu['sort']['process_cpu_s']:>6.1f} {cpu['ratio']:>5.2f}"
                )
            t = s["tpch_total"]
            print(f"{'total':>6} {t['sluice']['median']:>9.2f} {t['sort']['median']:>8.2f} {s['tpch_ratio']:>6.2f}")
            print(f"TPC-H total: {_cpu_text(s.get('tpch_cpu'))}")
        service = s.get("service")
        if service:
            if "heavy" in service:
                print(f"heavy job through the node service: {service['heavy']['median']:.1f}s "
                      f"(/ Sluice {service['heavy_ratio']:.2f})")  # fmt: skip
            if "tpch_total" in service:
                print(f"TPC-H total through the node service: {service['tpch_total']['median']:.1f}s "
                      f"(/ Sluice {service['tpch_ratio']:.2f})")  # fmt: skip
    for g in recorder.goals:
        print(f"goal {g['goal']} <= {g['target']}: {g['value']:.2f} -> {'met' if g['met'] else 'MISSED'}")
    s = recorder.summary
    print(f"answers checked: {s.get('answers_checked', 0)}; DuckDB: {s.get('duckdb_checked_queries', [])}")
    print(f"result: {path}\nchart: {chart}")


__all__ = ["run", "add_arguments", "BenchError"]
