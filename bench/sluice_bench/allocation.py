"""``sluice bench allocation``: what dynamic allocation costs a bursty job in executor-seconds, on
dev/cluster's standalone hosts (network namespaces of this machine, each with its own Worker),
three ways side by side in one run:

- ``sort``: Spark's sort shuffle with Spark's external shuffle service inside every Worker
  (``spark.shuffle.service.enabled=true`` on the Workers and the application): idle executors go
  after ``spark.dynamicAllocation.executorIdleTimeout``, their outputs served by the Worker;
- ``sluice``: Sluice with shuffle tracking (``spark.dynamicAllocation.shuffleTracking.enabled``),
  the only way without its service: executors holding a live shuffle's outputs stay;
- ``sluice-service``: Sluice with its node shuffle service (``sluice shuffle-service`` on every
  worker host, ``spark.sluice.service.enabled``), shuffle tracking off.

The job: ``--maps`` (200) short map tasks, then ``--reducers`` (2) reduce tasks that read their
input paced over ``--reduce-seconds`` (120, at least); up to ``--max-executors`` (4) executors of
one core, none before the job, Spark's idle timeout (60 s) unless ``--idle-timeout`` says
otherwise. After the map stage two executors run the reducers and the others idle: with a node
service they go after the idle timeout while the reducers still read what they wrote. An
executor's seconds are those it lived between the job's submission and completion (Spark's REST
API: ``allexecutors`` add and remove times); each released executor's idle time before release is
recorded beside them. Contenders take turns (A B C A B C ...), one application each, every
answer checked against the sort shuffle's of the same round. The machine's load average is
recorded before and after every application.

Needs root (network namespaces) and a Sluice checkout (its dev/cluster; ``--checkout``). Goals:
Sluice with its service at most the executor-seconds of the sort shuffle with Spark's service,
and its released executors idle at most the idle timeout + 10 s.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from sluice_bench import charts
from sluice_bench.apps import LOG_DIR, run_app, run_plan
from sluice_bench.args import sluice_options
from sluice_bench.cluster import dev_cluster
from sluice_bench.compare import difference
from sluice_bench.errors import BenchError
from sluice_bench.machine import load_average
from sluice_bench.results import Recorder, command_line, save_result, subtitle_of
from sluice_bench.stats import alternation, goal, median, ratio, spread

CONTENDERS = ("sort", "sluice", "sluice-service")
LABELS = {
    "sort": "sort + Spark's shuffle service",
    "sluice": "Sluice + shuffle tracking",
    "sluice-service": "Sluice + its node service",
}
MAPS, QUICK_MAPS = 200, 20
ROWS_PER_MAP, QUICK_ROWS_PER_MAP = 20_000, 1_000
REDUCERS = 2
REDUCE_SECONDS, QUICK_REDUCE_SECONDS = 120.0, 10.0
IDLE_TIMEOUT_S, QUICK_IDLE_TIMEOUT_S = 60, 3
MAX_EXECUTORS = 4
RELEASE_SLACK_S = 10.0  # the goal: released within the idle timeout + this
APP_TIMEOUT = 3600


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--maps", type=int, help=f"map tasks (default {MAPS}; quick {QUICK_MAPS})")
    parser.add_argument(
        "--rows-per-map", type=int, help=f"rows per map task (default {ROWS_PER_MAP:,}; quick {QUICK_ROWS_PER_MAP:,})"
    )
    parser.add_argument("--reducers", type=int, default=REDUCERS, help="reduce tasks (default %(default)s)")
    parser.add_argument(
        "--reduce-seconds",
        type=float,
        help=f"how long each reduce task reads, at least (default {REDUCE_SECONDS:.0f}; "
        f"quick {QUICK_REDUCE_SECONDS:.0f})",
    )
    parser.add_argument(
        "--idle-timeout",
        type=int,
        help=f"spark.dynamicAllocation.executorIdleTimeout in seconds (default Spark's {IDLE_TIMEOUT_S}; "
        f"quick {QUICK_IDLE_TIMEOUT_S})",
    )
    parser.add_argument(
        "--max-executors",
        type=int,
        default=MAX_EXECUTORS,
        help="spark.dynamicAllocation.maxExecutors (default %(default)s)",
    )
    parser.add_argument("--workers", type=int, default=2, help="worker hosts (default %(default)s)")
    parser.add_argument("--cores", type=int, default=2, help="cores per worker, one per executor (default %(default)s)")
    parser.add_argument("--memory", default="2g", help="memory per worker (default %(default)s)")
    parser.add_argument("--executor-memory", default="768m", help="memory per executor (default %(default)s)")
    parser.add_argument("--rate", default="1gbit", help="link rate in tc's spelling (default %(default)s)")
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help="which contenders run (default %(default)s)")
    parser.add_argument(
        "--checkout", help="the Sluice checkout whose dev/cluster to use (default: $SLUICE_ROOT, else .)"
    )


def spec_for(args: argparse.Namespace) -> Dict[str, Any]:
    """The applications' spec: the job, dynamic allocation's settings, and each contender's own."""
    quick = bool(args.quick)
    idle = args.idle_timeout if args.idle_timeout is not None else QUICK_IDLE_TIMEOUT_S if quick else IDLE_TIMEOUT_S
    job = {
        "maps": args.maps or (QUICK_MAPS if quick else MAPS),
        "rows_per_map": args.rows_per_map or (QUICK_ROWS_PER_MAP if quick else ROWS_PER_MAP),
        "reducers": args.reducers,
        "reduce_seconds": args.reduce_seconds or (QUICK_REDUCE_SECONDS if quick else REDUCE_SECONDS),
    }
    if min(job["maps"], job["rows_per_map"], job["reducers"], args.max_executors) < 1 or idle < 1:
        raise BenchError("--maps, --rows-per-map, --reducers, --max-executors and --idle-timeout must be at least 1")
    return {
        "master": None,
        "job": job,
        "idle_timeout_s": idle,
        "conf": {
            "spark.executor.cores": "1",
            "spark.executor.memory": args.executor_memory,
            "spark.dynamicAllocation.enabled": "true",
            "spark.dynamicAllocation.minExecutors": "0",
            "spark.dynamicAllocation.initialExecutors": "0",
            "spark.dynamicAllocation.maxExecutors": str(args.max_executors),
            "spark.dynamicAllocation.executorIdleTimeout": f"{idle}s",
            "spark.dynamicAllocation.schedulerBacklogTimeout": "1s",
            "spark.dynamicAllocation.sustainedSchedulerBacklogTimeout": "1s",
        },
        "contender_conf": {
            "sort": {
                "spark.shuffle.service.enabled": "true",
                "spark.dynamicAllocation.shuffleTracking.enabled": "false",
            },
            "sluice": {"spark.dynamicAllocation.shuffleTracking.enabled": "true"},
            "sluice-service": {"spark.dynamicAllocation.shuffleTracking.enabled": "false"},
        },
        "sluice_options": sluice_options(args),
    }


def parse_contenders(text: str) -> List[str]:
    names = [c.strip() for c in str(text).split(",") if c.strip()]
    if not names or [c for c in names if c not in CONTENDERS]:
        raise BenchError(f"--contenders takes some of {', '.join(CONTENDERS)}, not {text!r}")
    return list(dict.fromkeys(names))


def run(args: argparse.Namespace, argv: Optional[List[str]] = None) -> int:
    if os.geteuid() != 0:
        raise BenchError("needs root: the cluster's hosts are network namespaces (CAP_NET_ADMIN, CAP_SYS_ADMIN)")
    contenders = parse_contenders(args.contenders)
    rounds = args.rounds or (1 if args.quick else 3)
    spec = spec_for(args)
    dev = dev_cluster(args.checkout)
    settings = {
        "rounds": rounds,
        "quick": bool(args.quick),
        "contenders": contenders,
        "labels": {c: LABELS[c] for c in contenders},
        "workers": args.workers,
        "cores_per_worker": args.cores,
        "memory_per_worker": args.memory,
        "rate": args.rate,
        "spec": spec,
    }
    recorder = Recorder("allocation", command_line(argv), settings)
    runs: Dict[str, List[Dict[str, Any]]] = {c: [] for c in contenders}
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with dev.Cluster(
            workers=args.workers,
            rate=args.rate,
            cores=args.cores,
            memory=args.memory,
            sluice_service="sluice-service" in contenders,
            spark_shuffle_service="sort" in contenders,
        ) as cluster:
            print(
                f"[bench allocation] master {cluster.master_url}, workers "
                f"{', '.join(h.address for h in cluster.worker_hosts)}, namespaces {cluster.prefix}*",
                file=sys.stderr,
            )
            here = dict(spec, master=cluster.master_url)
            launcher = ["ip", "netns", "exec", cluster.driver.ns]
            env = cluster.host_env(cluster.driver)

            def one(item: Tuple[int, str]) -> None:
                round_number, contender = item
                load_before = load_average()
                result = run_app(
                    "allocation", contender, here, timeout=APP_TIMEOUT, log_dir=LOG_DIR, launcher=launcher, env=env
                )
                result.update(round=round_number, load_before=load_before, load_after=load_average())
                runs[contender].append(result)
                recorder.runs.append(result)

            run_plan(alternation(contenders, rounds), "bench allocation", lambda i: f"round {i[0]}: {i[1]}", one)
    except dev.ClusterError as e:
        raise BenchError(f"the cluster: {e}") from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    check_answers(runs, recorder)
    summarize(runs, float(spec["idle_timeout_s"]), recorder)
    path, chart = save_result(recorder, args.out, "allocation", draw)
    print_summary(recorder, path, chart)
    return 1 if recorder.mismatches else 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def check_answers(runs: Dict[str, List[Dict[str, Any]]], recorder: Recorder) -> None:
    """Every run's answer against the first contender's (the sort shuffle's) of the same round,
    and its rows against the job's; a run with failed tasks is noted (its cost includes them)."""
    first = next(iter(runs))
    checked = 0
    for contender, mine in runs.items():
        for run in mine:
            reference = next((r for r in runs[first] if r["round"] == run["round"]), None)
            if contender != first and reference is not None:
                diff = difference(reference["answer"], run["answer"])
                if diff:
                    recorder.mismatches.append(f"round {run['round']}, {contender}: {diff}")
                checked += 1
            if run.get("failed_tasks"):
                recorder.notes.append(f"round {run['round']}, {contender}: {run['failed_tasks']} failed tasks")
    recorder.summary["answers_checked"] = checked


def summarize(runs: Dict[str, List[Dict[str, Any]]], idle_timeout_s: float, recorder: Recorder) -> None:
    s: Dict[str, Any] = {"idle_timeout_s": idle_timeout_s, "contenders": {}}
    for contender, mine in runs.items():
        idle = [r["idle_s"] for run in mine for r in run["released_during_job"]]
        s["contenders"][contender] = {
            "label": LABELS[contender],
            "executor_seconds": spread([run["executor_seconds"] for run in mine]),
            "job_seconds": spread([run["job_seconds"] for run in mine]),
            "peak_executors": max((run["peak_executors"] for run in mine), default=0),
            "released_during_job": median([len(run["released_during_job"]) for run in mine]),
            "live_at_end": median([run["live_at_end"] for run in mine]),
            "idle_before_release_s": spread(idle),
        }
    by = s["contenders"]

    def med(contender: str) -> float:
        return float(by.get(contender, {}).get("executor_seconds", {}).get("median", float("nan")))

    s["service_over_sort"] = ratio(med("sluice-service"), med("sort"))
    s["tracking_over_sort"] = ratio(med("sluice"), med("sort"))
    s["service_over_tracking"] = ratio(med("sluice-service"), med("sluice"))
    recorder.summary.update(s)
    if "sluice-service" in by and "sort" in by:
        recorder.goals.append(
            goal(
                "executor-seconds, Sluice + its node service / sort + Spark's shuffle service",
                s["service_over_sort"],
                1.0,
                at_most=True,
            )
        )
    if "sluice-service" in by:
        most = by["sluice-service"]["idle_before_release_s"].get("max", float("nan"))
        recorder.goals.append(
            goal(
                "Sluice + its node service: longest idle time of a released executor - executorIdleTimeout",
                most - idle_timeout_s,
                RELEASE_SLACK_S,
                at_most=True,
                unit="s",
            )
        )


def draw(path: Path, result: Dict[str, Any]) -> Path:
    """The chart of a result (also from a saved JSON: ``sluice bench allocation --replot``)."""
    by = result["summary"]["contenders"]
    seconds = {
        c: (v["executor_seconds"]["median"], v["executor_seconds"]["min"], v["executor_seconds"]["max"])
        for c, v in by.items()
        if v["executor_seconds"]
    }
    timelines = {run["contender"]: run["live_counts"] for run in result["runs"]}  # the last round's
    return charts.allocation_chart(
        path, seconds, {c: v["label"] for c, v in by.items()}, timelines, subtitle_of(result)
    )


def print_summary(recorder: Recorder, path: Path, chart: Path) -> None:
    s = recorder.summary
    print(f"\n{'contender':<32}{'executor-s':>11}{'job s':>8}{'peak':>6}{'released':>10}{'idle before release s':>23}")
    for v in s["contenders"].values():
        idle = v["idle_before_release_s"]
        idle_text = f"{idle['median']:.1f} (max {idle['max']:.1f})" if idle else "-"
        print(
            f"{v['label']:<32}{v['executor_seconds'].get('median', float('nan')):>11.1f}"
            f"{v['job_seconds'].get('median', float('nan')):>8.1f}{v['peak_executors']:>6}"
            f"{v['released_during_job']:>10.1f}{idle_text:>23}"
        )
    print(
        f"Sluice + service / sort + service: {s['service_over_sort']:.2f}; Sluice + tracking / sort + service: "
        f"{s['tracking_over_sort']:.2f}; executorIdleTimeout {s['idle_timeout_s']:.0f} s"
    )
    for g in recorder.goals:
        sign = "<=" if g["at_most"] else ">="
        print(f"goal {g['goal']} {sign} {g['target']}: {g['value']:.2f} -> {'met' if g['met'] else 'MISSED'}")
    print(f"answers checked: {s.get('answers_checked', 0)}")
    for m in recorder.mismatches:
        print("MISMATCH: " + m)
    print(f"result: {path}\nchart: {chart}")
