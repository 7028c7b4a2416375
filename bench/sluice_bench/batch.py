"""``sluice bench batch``: a shuffle-heavy DataFrame job (about 1 GB of shuffle writes) and TPC-H
SF1's 22 queries, through Sluice and through Spark's sort shuffle, alternated over rounds on
``local-cluster[2,1,...]``. Every Sluice answer is checked against the sort shuffle's answer of
the same round; a few queries are also checked against DuckDB. Any difference fails the run.

Goals: heavy job at most 0.80 of the sort shuffle's time; TPC-H total at most 0.90.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from sluice_bench import charts, tpch
from sluice_bench._common import (
    LOG_DIR,
    BenchError,
    Recorder,
    alternation,
    command_line,
    goal,
    median,
    ratio,
    run_app,
    run_plan,
    save_result,
    sluice_options,
    spread,
    subtitle_of,
)
from sluice_bench.compare import difference, plain_rows

CONTENDERS = ("sluice", "sort")
HEAVY_ROWS = 8_000_000  # about 1 GB of shuffle writes with the sort shuffle (lz4): 125 bytes a row
QUICK_HEAVY_ROWS = 200_000
DUCKDB_QUERIES = (1, 6)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--heavy-rows", type=int, help=f"rows of the heavy job (default {HEAVY_ROWS:,}; quick {QUICK_HEAVY_ROWS:,})"
    )
    parser.add_argument("--scale", type=float, help="TPC-H scale factor (default 1; quick 0.01)")
    parser.add_argument("--queries", help="TPC-H queries to run, e.g. 1,3,6 (default all 22)")
    parser.add_argument("--no-heavy", action="store_true", help="skip the heavy job")
    parser.add_argument("--no-tpch", action="store_true", help="skip TPC-H")
    parser.add_argument("--no-duckdb", action="store_true", help="skip checking queries against DuckDB")
    parser.add_argument(
        "--duckdb-queries",
        default=",".join(str(q) for q in DUCKDB_QUERIES),
        help="queries whose sort-shuffle answers are checked against DuckDB (default %(default)s)",
    )
    parser.add_argument("--memory", default="3072", help="executor memory in MiB (local-cluster[2,1,MEM])")


def spec_for(args: argparse.Namespace) -> Dict[str, Any]:
    quick = bool(args.quick)
    rows = args.heavy_rows or (QUICK_HEAVY_ROWS if quick else HEAVY_ROWS)
    scale = args.scale or (0.01 if quick else 1.0)
    queries = [int(q) for q in args.queries.split(",")] if args.queries else sorted(tpch.QUERIES)
    spec: Dict[str, Any] = {
        "master": f"local-cluster[2,1,{args.memory}]",
        "conf": {
            "spark.driver.memory": "2g",
            "spark.sql.adaptive.enabled": "false",
            "spark.sql.shuffle.partitions": "64",
        },
        "sluice_options": sluice_options(args),
        "heavy": None if args.no_heavy else {"rows": rows, "partitions": 16},
        "tpch": None,
        "scale": scale,
    }
    if not args.no_tpch:
        data_dir = tpch.default_data_dir(scale)
        spec["tpch"] = {"data_dir": str(data_dir), "queries": queries}
    return spec


def run(args: argparse.Namespace, argv: Optional[List[str]] = None) -> int:
    rounds = args.rounds or (1 if args.quick else 3)
    spec = spec_for(args)
    if spec["tpch"] is not None:
        tpch.ensure_data(Path(spec["tpch"]["data_dir"]), float(spec["scale"]))
    recorder = Recorder("batch", command_line(argv), {"rounds": rounds, "quick": bool(args.quick), "spec": spec})
    plan = alternation(CONTENDERS, rounds)
    results: Dict[str, List[Dict[str, Any]]] = {c: [] for c in CONTENDERS}

    def one(item: Tuple[int, str]) -> None:
        round_number, contender = item
        result = run_app("batch", contender, spec, timeout=4 * 3600, log_dir=LOG_DIR)
        result["round"] = round_number
        results[contender].append(result)
        recorder.runs.append(_without_answers(result))

    run_plan(plan, "bench batch", lambda i: f"round {i[0]}: {i[1]}", one)

    check_answers(results, recorder)
    if spec["tpch"] is not None and not args.no_duckdb:
        duck = [int(q) for q in args.duckdb_queries.split(",") if q.strip()]
        check_duckdb(results["sort"][0].get("tpch", {}), Path(spec["tpch"]["data_dir"]), recorder, duck)
    summarize(results, recorder, spec)
    path, chart = save_result(recorder, args.out, "batch", draw)
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


def summarize(results: Dict[str, List[Dict[str, Any]]], recorder: Recorder, spec: Dict[str, Any]) -> None:
    s = recorder.summary
    if spec["heavy"] is not None:
        heavy = {c: spread([r["heavy"]["seconds"] for r in results[c]]) for c in CONTENDERS}
        s["heavy"] = heavy
        s["heavy_shuffle_write_bytes"] = {
            c: median([r["heavy"]["shuffle_write_bytes"] for r in results[c]]) for c in CONTENDERS
        }
        s["heavy_ratio"] = ratio(heavy["sluice"]["median"], heavy["sort"]["median"])
        for metric in ("executor_run_ms", "shuffle_fetch_wait_ms", "shuffle_write_time_ns", "jvm_gc_ms", "tasks"):
            s[f"heavy_{metric}"] = {c: median([r["heavy"].get(metric, 0) for r in results[c]]) for c in CONTENDERS}
        recorder.goals.append(goal("heavy job: Sluice time / sort time", s["heavy_ratio"], 0.80, at_most=True))
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
            }
            for metric in ("executor_run_ms", "shuffle_fetch_wait_ms", "shuffle_write_time_ns", "jvm_gc_ms", "tasks"):
                for c in CONTENDERS:
                    per_query[q][f"{c}_{metric}"] = median([r["tpch"][q].get(metric, 0) for r in results[c]])
        totals = {c: spread([sum(r["tpch"][q]["seconds"] for q in queries) for r in results[c]]) for c in CONTENDERS}
        s["tpch_queries"] = per_query
        s["tpch_total"] = totals
        s["tpch_ratio"] = ratio(totals["sluice"]["median"], totals["sort"]["median"])
        recorder.goals.append(goal("TPC-H total: Sluice time / sort time", s["tpch_ratio"], 0.90, at_most=True))


def draw(path: Path, result: Dict[str, Any]) -> Path:
    """The chart of a result (also from a saved JSON: ``sluice bench batch --replot``)."""
    s = result["summary"]
    heavy = None
    if "heavy" in s:
        heavy = {c: (v["median"], v["min"], v["max"]) for c, v in s["heavy"].items()}
    queries = {f"Q{q}": v["ratio"] for q, v in s.get("tpch_queries", {}).items()}
    subtitle = subtitle_of(result)
    return charts.batch_chart(path, heavy, queries, s.get("tpch_ratio"), subtitle)


def print_summary(recorder: Recorder, path: Path, chart: Path) -> None:
    s = recorder.summary
    print()
    if "heavy" in s:
        h = s["heavy"]
        print(
            f"heavy job: Sluice {h['sluice']['median']:.1f}s, sort {h['sort']['median']:.1f}s "
            f"(ratio {s['heavy_ratio']:.2f}; sort shuffle wrote {s['heavy_shuffle_write_bytes']['sort'] / 1e9:.2f} GB)"
        )
    if "tpch_queries" in s:
        print(f"{'query':>6} {'sluice s':>9} {'sort s':>8} {'ratio':>6}")
        for q, v in s["tpch_queries"].items():
            print(f"{'Q' + q:>6} {v['sluice_s']:>9.2f} {v['sort_s']:>8.2f} {v['ratio']:>6.2f}")
        t = s["tpch_total"]
        print(f"{'total':>6} {t['sluice']['median']:>9.2f} {t['sort']['median']:>8.2f} {s['tpch_ratio']:>6.2f}")
    for g in recorder.goals:
        print(f"goal {g['goal']} <= {g['target']}: {g['value']:.2f} -> {'met' if g['met'] else 'MISSED'}")
    print(f"answers checked: {s.get('answers_checked', 0)}; DuckDB: {s.get('duckdb_checked_queries', [])}")
    print(f"result: {path}\nchart: {chart}")


__all__ = ["run", "add_arguments", "BenchError"]
