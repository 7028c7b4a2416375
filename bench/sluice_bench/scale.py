"""``sluice bench scale``: how the cost grows with the work, Sluice against the sort shuffle on
``local-cluster[2,1,...]``: the data ×1, ×4 and ×16 (16 map × 16 reduce partitions), and the
partitions from 10 × 10 to 200 × 200 (data ×1). Then the wide shapes of real jobs on
``local-cluster[2,2,...]``, two task slots per executor: 1500 maps × 400 reducers, 6000 × 400,
4000 × 200, 200 × 4000 and 4000 × 1000, each followed by a global aggregate (one task reading every reducer's
output), with the reducers' summed fetch wait against the sort shuffle's and, for Sluice, each
reducer's fan-in (channels, requests, control messages and remote frames, from its metrics); and
(``--groups growth``) 1,000 and 10,000 maps into 1,000 reducers, to see how each shuffle's time
grows with the map tasks; and (``--groups extreme``) 100,000 maps into 200 reducers and 20,000
into 2,000, one row per map and reducer, each shape in applications of its own with a deadline
per job, where completing at all is the first result.
While each job runs, the established TCP connections between the executors' Sluice ports are
counted from /proc: Flink multiplexes every channel between two executors over one connection,
so the goal is exactly one per executor pair (and direction), whatever the partitions. The sort
shuffle's jobs are watched the same way, on the block managers' port, so both contenders pay for
the sampling. Around each job, each executor is probed (for Sluice, its peak network memory
against its budget, as ``sluice bench memory`` does); the probe's 1 ms sampler thread runs in
both contenders' executors. Every job reports its executors' CPU per GB shuffled, Sluice
against the sort shuffle, as ``sluice bench batch`` does (executor processes' user + system
CPU seconds from ``/proc``, over the sort shuffle's shuffle write bytes of the same job).
With ``--service`` another contender, ``sluice-service``, runs every job through Sluice with its
map outputs served by its node shuffle service (one ``sluice shuffle-service`` on 127.0.0.1 for
the whole run) instead of by the executors: ``service_s / sluice_s`` is what reading through the
service costs (goal: at most 1.05 at 1500 maps x 400 reducers). The service outlives applications,
as on a node: one unmeasured application primes it first (``service_priming`` in the summary).
With ``--floor`` a third contender runs every job through a shuffle that moves nothing
(``DiscardingShuffleManager``: the map side computed and drained, nothing read): the job's cost
to Spark without any shuffle cost, so ``floor_s / sort_s`` bounds the ratio any shuffle can reach.
With ``--simulated``, instead: a cluster of 16, 64 and 256 executors simulated in one JVM, and index
reads at 4,000 maps x 1,000 reducers (``sluice_bench.simulated``).
"""

from __future__ import annotations

import argparse
import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from sluice_bench import charts, simulated
from sluice_bench.apps import LOG_DIR, run_alternating_apps, run_app
from sluice_bench.args import HOST_LOCAL_HELP, host_local_conf, host_local_suffix, sluice_options
from sluice_bench.batch import CPU_GOAL, GB, cpu_report
from sluice_bench.compare import difference
from sluice_bench.errors import BenchError
from sluice_bench.results import Recorder, command_line, save_result, subtitle_of
from sluice_bench.service import SERVICE_CONTENDER, SERVICE_GOAL, NodeService, service_log
from sluice_bench.stats import goal, median, ratio

MIB = 1 << 20
BASE_ROWS = 500_000
QUICK_BASE_ROWS = 20_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base-rows", type=int, help=f"rows at size x1 (default {BASE_ROWS:,}; quick {QUICK_BASE_ROWS:,})"
    )
    parser.add_argument(
        "--memory",
        default="2048",
        help="worker memory in MiB (local-cluster[2,1,MEM], local-cluster[2,2,MEM] for the wide shapes)",
    )
    parser.add_argument(
        "--groups",
        default="classic,wide",
        help="which groups to run: classic (size and partitions on local-cluster[2,1,MEM]), "
        "wide (the wide shapes on local-cluster[2,2,MEM]), growth (1,000 and 10,000 maps into 1,000 "
        "reducers on local-cluster[2,2,MEM]), extreme (100,000 maps x 200 reducers and 20,000 x 2,000 "
        f"on local-cluster[2,2,MEM] with MEM MiB executors and a {EXTREME_DRIVER_MEMORY} driver, "
        f"one application per shape and contender, each job cancelled after "
        f"{EXTREME_JOB_TIMEOUT_S // 60} minutes; one round unless --rounds says otherwise, hours "
        "in all); default classic,wide; a run of one group is saved as scale-<group>.json (with --service: "
        "scale[-<group>]-service.json)",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also run every job through a shuffle that moves nothing (the floor: what the job costs Spark "
        "without any shuffle cost; its answers are not checked), reported as floor_s and floor / sort",
    )
    parser.add_argument(
        "--simulated",
        action="store_true",
        help="instead: a cluster of 16, 64 and 256 executors simulated in one JVM (per-executor heap, gate "
        "memory, index reads, connections, descriptors, threads) and index reads at 4,000 maps x 1,000 "
        "reducers at index cache sizes from 0 to 1g; saved as scale-simulated.json (see sluice_bench.simulated)",
    )
    parser.add_argument(
        "--executors",
        help="with --simulated: the executor counts, e.g. 16,64,256 (default; quick 4,8)",
    )
    parser.add_argument(
        "--service",
        action="store_true",
        help="also run every job through Sluice with its map outputs served by its node shuffle service "
        "(contender sluice-service, a sluice shuffle-service daemon started for the run), reported as service_s "
        "and service / sluice",
    )
    parser.add_argument("--host-local", action="store_true", help=HOST_LOCAL_HELP)
    parser.add_argument(
        "--shapes",
        help="only these shapes (maps x reducers) of the chosen groups, e.g. 1500x400,6000x400 (default all)",
    )


def configs(base: int, quick: bool) -> List[Dict[str, Any]]:
    sizes = (1, 4) if quick else (1, 4, 16)
    parts = (10, 50) if quick else (10, 50, 200)
    out = [{"name": f"size x{s}", "rows": base * s, "maps": 16, "reduces": 16} for s in sizes]
    out += [{"name": f"parts {p}x{p}", "rows": base, "maps": p, "reduces": p} for p in parts]
    return out


# Maps x reducers of real jobs; --quick runs a reduced one.
WIDE_SHAPES = ((1500, 400), (6000, 400), (4000, 200), (200, 4000), (4000, 1000))
QUICK_WIDE_SHAPES = ((300, 100),)
# Goals per wide shape: Sluice's time over the sort shuffle's, and (where set) the reducers'
# summed fetch wait over the sort shuffle's.
WIDE_TIME_GOALS = {(1500, 400): 0.50, (6000, 400): 0.50, (4000, 200): 0.20, (200, 4000): 0.60, (4000, 1000): 0.50}
WIDE_FETCH_WAIT_GOALS = {(1500, 400): 0.75, (6000, 400): 0.75}
# The map-count growth group (--groups growth): 1,000 to 10,000 maps into 1,000 reducers.
GROWTH_SHAPES = ((1000, 1000), (10000, 1000))
QUICK_GROWTH_SHAPES = ((100, 100), (400, 100))
GROWTH_TIME_GOAL = 0.50
EXECUTORS = 2
# The shape whose time through the node service has a goal (--service).
SERVICE_SHAPE = (1500, 400)


# The extreme group (--groups extreme): shapes whose cost is the number of map outputs, one row per
# map and reducer (many blocks of one row or none), each job cancelled after the deadline.
EXTREME_SHAPES = ((100_000, 200), (20_000, 2_000))
QUICK_EXTREME_SHAPES = ((2_000, 20), (400, 200))
EXTREME_JOB_TIMEOUT_S = 25 * 60
# The driver tracks 100,000 tasks (the UI keeps up to spark.ui.retainedTasks = 100,000 of a stage)
# and their map statuses: Spark's default 1 GiB driver is too small to be sure.
EXTREME_DRIVER_MEMORY = "4g"
# Start-up, warm-up and the probes around the job, on top of the job's deadline.
APP_MARGIN_S = 900
GROUPS = ("classic", "wide", "growth", "extreme")
CONTENDERS = ("sluice", "sort")
# The --floor contender (sluice_bench.session): a shuffle that moves nothing.
FLOOR = "floor"


def wide_configs(base: int, quick: bool) -> List[Dict[str, Any]]:
    """The wide shapes, run with two task slots per executor (``local-cluster[2,2,MEM]``). Each
    map writes at least 5 rows per reducer (so nearly every map output has data for every
    reducer, as in a real job: Spark leaves empty blocks out of a reducer's input)."""
    return [
        {"name": f"wide {m}x{r}", "rows": max(base, 5 * m * r), "maps": m, "reduces": r}
        for m, r in (QUICK_WIDE_SHAPES if quick else WIDE_SHAPES)
    ]


def shape_configs(group: str, shapes: Sequence[Tuple[int, int]], rows_per_block: int) -> List[Dict[str, Any]]:
    """``group``'s shapes (maps, reducers), each with ``rows_per_block`` rows per map and reducer."""
    return [{"name": f"{group} {m}x{r}", "rows": rows_per_block * m * r, "maps": m, "reduces": r} for m, r in shapes]


def growth_configs(quick: bool) -> List[Dict[str, Any]]:
    """From 1,000 to 10,000 maps into 1,000 reducers, 2 rows per map and reducer (10,000 x 1,000 is
    20 M rows: ten million map outputs' blocks, most of a hundred bytes)."""
    return shape_configs("growth", QUICK_GROWTH_SHAPES if quick else GROWTH_SHAPES, 2)


def extreme_configs(quick: bool) -> List[Dict[str, Any]]:
    """100,000 maps into 200 reducers and 20,000 into 2,000, one row per map and reducer on average
    (20 M and 40 M rows: a few hundred rows per map task, so the map outputs' count, not the data,
    is the work; after the map-side partial aggregation about a third of the blocks are empty)."""
    return shape_configs("extreme", QUICK_EXTREME_SHAPES if quick else EXTREME_SHAPES, 1)


@dataclass
class Apps:
    """Applications to run: one per contender and round, alternated, all with ``spec``."""

    group: str
    spec: Dict[str, Any]
    rounds: int
    timeout: float


def plan(args: argparse.Namespace) -> Tuple[str, List[Apps]]:
    """The result's name and the applications ``args`` asks for, in the order they run."""
    quick = bool(args.quick)
    rounds = args.rounds or (1 if quick else 2)
    base = args.base_rows or (QUICK_BASE_ROWS if quick else BASE_ROWS)
    groups = [g.strip() for g in str(args.groups).split(",") if g.strip()]
    unknown = [g for g in groups if g not in GROUPS]
    if unknown or not groups:
        raise SystemExit(f"sluice bench scale: --groups takes {', '.join(GROUPS)}, not {args.groups!r}")
    spec: Dict[str, Any] = {
        "master": f"local-cluster[2,1,{args.memory}]",
        "conf": {"spark.sql.adaptive.enabled": "false", **host_local_conf(args)},
        "sluice_options": sluice_options(args),
        "configs": configs(base, quick),
    }
    wide = dict(
        spec,
        master=f"local-cluster[2,2,{args.memory}]",
        configs=wide_configs(base, quick),
        warmup={"name": "warm-up", "rows": base, "maps": 16, "reduces": 16},
    )
    # AQE stays off, as in the other groups, so that both run exactly these reducers.
    extreme = dict(
        wide,
        conf=dict(
            wide["conf"], **{"spark.executor.memory": f"{args.memory}m", "spark.driver.memory": EXTREME_DRIVER_MEMORY}
        ),
        job_timeout_s=EXTREME_JOB_TIMEOUT_S,
    )
    apps = {
        "classic": [Apps("classic", spec, rounds, 7200)],
        "wide": [Apps("wide", wide, rounds, 7200)],
        "growth": [Apps("growth", dict(wide, configs=growth_configs(quick)), rounds, 7200)],
        # One shape per application: a driver or executor lost on one shape leaves the other's runs.
        "extreme": [
            Apps("extreme", dict(extreme, configs=[c]), args.rounds or 1, EXTREME_JOB_TIMEOUT_S + APP_MARGIN_S)
            for c in extreme_configs(quick)
        ],
    }
    name = ("scale" if set(groups) == {"classic", "wide"} else f"scale-{groups[0]}") + host_local_suffix(args)
    if getattr(args, "service", False):
        name += "-service"  # beside, not over, the result without the node service
    chosen = [a for g in groups for a in apps[g]]
    if getattr(args, "shapes", None):
        chosen = only_shapes(chosen, str(args.shapes))
    return name, chosen


def only_shapes(apps: List[Apps], shapes: str) -> List[Apps]:
    """``apps`` with only the configs of ``shapes`` ("MxR,MxR"); SystemExit naming a shape no group has."""
    wanted: Set[Tuple[int, int]] = set()
    for s in shapes.split(","):
        m = re.fullmatch(r"\s*(\d+)x(\d+)\s*", s)
        if not m:
            raise SystemExit(f"sluice bench scale: --shapes takes MAPSxREDUCERS,..., not {s!r}")
        wanted.add((int(m.group(1)), int(m.group(2))))
    out: List[Apps] = []
    found: Set[Tuple[int, int]] = set()
    for a in apps:
        configs = [c for c in a.spec["configs"] if (c["maps"], c["reduces"]) in wanted]
        found.update((c["maps"], c["reduces"]) for c in configs)
        if configs:
            out.append(Apps(a.group, dict(a.spec, configs=configs), a.rounds, a.timeout))
    missing = sorted(wanted - found)
    if missing:
        raise SystemExit(f"sluice bench scale: no chosen group has the shapes {missing} (--shapes)")
    return out


def result_name(args: argparse.Namespace) -> str:
    return simulated.NAME if getattr(args, "simulated", False) else plan(args)[0]


def failed_app(spec: Dict[str, Any]) -> Callable[[str, str], Dict[str, Any]]:
    """A failed application's run: every config of ``spec`` failed with the application's error."""

    def run(contender: str, message: str) -> Dict[str, Any]:
        error = {"seconds": None, "answer": None, "error": f"the application failed: {message}"[:4000]}
        return {"contender": contender, "runs": {c["name"]: dict(error) for c in spec["configs"]}}

    return run


def run(args: argparse.Namespace, argv: Optional[List[str]] = None) -> int:
    if getattr(args, "simulated", False):
        return simulated.run(args, argv)
    name, apps = plan(args)
    service = bool(getattr(args, "service", False))
    contenders: Tuple[str, ...] = CONTENDERS
    if service:
        contenders = (*contenders, SERVICE_CONTENDER)
    if getattr(args, "floor", False):
        contenders = (*contenders, FLOOR)
    settings = {
        "rounds": max(a.rounds for a in apps),
        "quick": bool(args.quick),
        "contenders": list(contenders),
        "groups": {a.group: {"rounds": a.rounds, "spec": dict(a.spec, configs=None)} for a in apps},
    }
    recorder = Recorder(name, command_line(argv), settings)
    run_configs: List[Dict[str, Any]] = []
    with NodeService(service_log(LOG_DIR, "scale")) if service else contextlib.nullcontext() as node:
        for a in apps:
            spec = dict(a.spec, service_port=node.port, service_pid=node.pid) if node is not None else a.spec
            if node is not None and a is apps[0]:
                recorder.summary["service_priming"] = prime_service(spec, a.timeout)
            # The extreme group's failures are its results: an application that fails is recorded.
            failed = failed_app(a.spec) if a.group == "extreme" else None
            run_alternating_apps(
                recorder, "scale", spec, a.rounds, timeout=a.timeout, contenders=contenders, failed_run=failed
            )
            run_configs += a.spec["configs"]
            summarize(recorder, run_configs)
            path, chart = save_result(recorder, args.out, name, draw)  # after every group: a long run keeps what it has
        if node is not None:  # what it served (bytesSent), and that every application left it
            recorder.summary["service_status"] = node.status()
            path, chart = save_result(recorder, args.out, name, draw)
    print_summary(recorder, path, chart)
    return 1 if recorder.mismatches or recorder.summary["failures"] else 0


def prime_service(spec: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    """Runs one application of the ``sluice-service`` contender before the measured rounds and
    returns its runs, which no median counts. A node service outlives the applications it serves
    (a NodeManager's auxiliary service, a DaemonSet's pod): what its JVM pays once, its JIT
    compiling its read path above all, is paid before the first measured job, as on a node that
    served anything before. The executors' JVMs are new in every application, primed or not."""
    try:
        primed = run_app("scale", SERVICE_CONTENDER, spec, timeout=timeout, log_dir=LOG_DIR)
    except BenchError as e:
        raise BenchError(f"priming the node service failed: {e}") from e
    return {
        name: {k: run.get(k) for k in ("seconds", "service_process_cpu_s", "service_cpu_by_thread")}
        for name, run in primed.get("runs", {}).items()
    }


def draw(path: Path, result: Dict[str, Any]) -> Path:
    """The chart of a result (also from a saved JSON: ``sluice bench scale --replot``)."""
    if result.get("benchmark") == simulated.NAME:
        return simulated.draw(path, result)
    groups: Dict[str, Dict[str, Optional[float]]] = {
        name: {"sluice": v["sluice_s"], "sort": v["sort_s"]} for name, v in result["summary"]["configs"].items()
    }
    for name, v in result["summary"]["configs"].items():
        if "service_s" in v:  # --service: read through the node service
            groups[name][SERVICE_CONTENDER] = v["service_s"]
    return charts.scale_chart(path, groups, subtitle_of(result))


def summarize(recorder: Recorder, config_list: List[Dict[str, Any]]) -> None:
    """The summary, goals and mismatches of the runs so far (recomputed from the runs, so that it
    can be called after every group)."""
    recorder.goals.clear()
    recorder.mismatches.clear()
    s: Dict[str, Any] = {}
    failures: List[str] = []
    for c in config_list:
        name = c["name"]
        runs = [r for r in recorder.runs if name in r["runs"]]
        failures += [
            f"round {r['round']}, {r['contender']}, {name}: {r['runs'][name]['error']}"
            for r in runs
            if r["runs"][name].get("error")
        ]
        times = {
            k: median(
                [
                    r["runs"][name]["seconds"]
                    for r in runs
                    if r["contender"] == k and r["runs"][name]["seconds"] is not None
                ]
            )
            for k in ("sluice", "sort")
        }
        waits = {
            k: median(
                [
                    r["runs"][name]["shuffle_fetch_wait_ms"]
                    for r in runs
                    if r["contender"] == k and "shuffle_fetch_wait_ms" in r["runs"][name]
                ]
            )
            for k in ("sluice", "sort")
        }
        fan = [r["runs"][name]["fan_in"] for r in runs if r["contender"] == "sluice" and "fan_in" in r["runs"][name]]
        fan = [f for f in fan if f.get("readers")]
        s[name] = {
            "sluice_s": times["sluice"],
            "sort_s": times["sort"],
            "ratio": ratio(times["sluice"], times["sort"]),
            "fetch_wait_ms": waits,
            "fetch_wait_ratio": ratio(waits["sluice"], waits["sort"]),
            "fan_in": {
                "channels_per_reducer_max": max((f["channels_max"] for f in fan), default=float("nan")),
                "control_messages_per_reducer": median(f["numControlMessages_mean"] for f in fan),
                "remote_frames_per_reducer": median(f["numBuffersInRemote_mean"] for f in fan),
                "requests_per_reducer": median(f["numPartitionRequests_mean"] for f in fan),
            },
            # Whether each contender ran this config and every one of its runs gave an answer.
            "completed": {
                k: bool(mine) and all(r["runs"][name].get("seconds") is not None for r in mine)
                for k in ("sluice", "sort")
                for mine in [[r for r in runs if r["contender"] == k]]
            },
            "rows": c["rows"],
            "maps": c["maps"],
            "reduces": c["reduces"],
            "sort_shuffle_write_bytes": median(
                [
                    r["runs"][name]["shuffle_write_bytes"]
                    for r in runs
                    if r["contender"] == "sort" and "shuffle_write_bytes" in r["runs"][name]
                ]
            ),
        }
        served = [r["runs"][name]["seconds"] for r in runs if r["contender"] == SERVICE_CONTENDER]
        if served:
            # Read through the node service against read from the executors, both Sluice.
            s[name]["service_s"] = median([t for t in served if t is not None])
            s[name]["service_ratio"] = ratio(s[name]["service_s"], times["sluice"])
            # The CPU the serving costs: the service's JVM and the executors' beside the executors
            # that serve their own outputs (medians; the service's absent when it was not measured).
            mine = [r["runs"][name] for r in runs if r["contender"] == SERVICE_CONTENDER]
            service_cpu = [v["service_process_cpu_s"] for v in mine if "service_process_cpu_s" in v]
            if service_cpu:
                executors = median([v["executor_process_cpu_s"] for v in mine if "executor_process_cpu_s" in v])
                sluice_cpu = median(
                    [r["runs"][name]["executor_process_cpu_s"] for r in runs
                     if r["contender"] == "sluice" and "executor_process_cpu_s" in r["runs"][name]]
                )  # fmt: skip
                service_median = median(service_cpu)
                s[name]["service_cpu_s"] = {"service": service_median, "executors": executors}
                s[name]["service_cpu_ratio"] = ratio(service_median + executors, sluice_cpu)
        floor = [r["runs"][name]["seconds"] for r in runs if r["contender"] == FLOOR]
        if floor:
            # No shuffle is faster than one that moves nothing: floor / sort bounds every shuffle's ratio.
            s[name]["floor_s"] = median([t for t in floor if t is not None])
            s[name]["floor_ratio"] = ratio(s[name]["floor_s"], times["sort"])
        s[name]["cpu"] = cpu_report(
            {
                k: [r["runs"][name].get("executor_process_cpu_s") for r in runs if r["contender"] == k]
                for k in ("sluice", "sort")
            },
            {
                k: [r["runs"][name].get("executor_cpu_ns", 0) for r in runs if r["contender"] == k]
                for k in ("sluice", "sort")
            },
            s[name]["sort_shuffle_write_bytes"],
        )
        # The driver's CPU seconds per contender (median): on 2 cores it competes with the executors.
        s[name]["driver_cpu_s"] = {
            k: median(
                [r["runs"][name]["driver_process_cpu_s"] for r in runs
                 if r["contender"] == k and "driver_process_cpu_s" in r["runs"][name]]
            )
            for k in (*CONTENDERS, FLOOR)
            if any(r["contender"] == k for r in runs)
        }  # fmt: skip
        memory = [r["runs"][name]["network_memory"] for r in runs if "network_memory" in r["runs"][name]]
        if memory:
            s[name]["network_peak_bytes"] = max(m["peak_used_bytes"] for m in memory)
            s[name]["network_budget_bytes"] = max(m["budget_bytes"] for m in memory)
            s[name]["network_peak_over_budget"] = ratio(s[name]["network_peak_bytes"], s[name]["network_budget_bytes"])
    for prefix in ("size", "parts", "wide", "growth", "extreme"):
        names = [c["name"] for c in config_list if c["name"].startswith(prefix)]
        if names:
            first = s[names[0]]
            for n in names:
                s[n]["growth_sluice"] = ratio(s[n]["sluice_s"], first["sluice_s"])
                s[n]["growth_sort"] = ratio(s[n]["sort_s"], first["sort_s"])
    recorder.summary["configs"] = s
    recorder.summary["failures"] = failures
    # CPU per GB over all jobs together: the sum of the jobs' median CPU seconds over the sum of
    # the sort shuffle's bytes (jobs without a measured CPU left out of both).
    measured = [v for v in s.values() if v["cpu"]["ratio"] == v["cpu"]["ratio"]]
    total_gb = sum(v["sort_shuffle_write_bytes"] for v in measured) / GB
    all_cpu = {k: sum(v["cpu"][k]["process_cpu_s"] for v in measured) for k in ("sluice", "sort")}
    recorder.summary["cpu_all_jobs"] = {
        "gb_shuffled": total_gb,
        "sluice_process_cpu_s_per_gb": ratio(all_cpu["sluice"], total_gb),
        "sort_process_cpu_s_per_gb": ratio(all_cpu["sort"], total_gb),
        "ratio": ratio(all_cpu["sluice"], all_cpu["sort"]),
    }
    recorder.goals.append(
        goal(
            "executor CPU s per GB shuffled, Sluice / sort, all jobs together",
            recorder.summary["cpu_all_jobs"]["ratio"],
            CPU_GOAL,
            at_most=True,
        )
    )
    # Connections per executor pair, the most seen in any sample of any run: Sluice's (the goal)
    # and, for comparison, the sort shuffle's to the block managers' ports.
    seen_by: Dict[str, Dict[str, int]] = {"sluice": {}, "sort": {}}
    for r in recorder.runs:
        seen = seen_by.setdefault(r["contender"], {})
        for name, run in r["runs"].items():
            for pair, n in run.get("connections", {}).items():
                seen[f"{name}: {pair}"] = max(seen.get(f"{name}: {pair}", 0), int(n))
    seen = seen_by["sluice"]
    recorder.summary["connections"] = seen
    recorder.summary["sort_connections"] = seen_by["sort"]
    recorder.summary["sort_max_connections_per_pair"] = max(seen_by["sort"].values(), default=0)
    most = max(seen.values(), default=0)
    recorder.summary["max_connections_per_pair"] = most
    no_connection = "no Sluice connection was seen (no executor reported a Sluice port)"
    if not seen and no_connection not in recorder.notes:
        recorder.notes.append(no_connection)
    recorder.goals.append(
        goal("TCP connections per executor pair and direction (most seen)", float(most), 1.0, at_most=True)
    )
    for c in config_list:
        shape = (int(c["maps"]), int(c["reduces"]))
        name = c["name"]
        if name.startswith("wide") and shape in WIDE_TIME_GOALS:
            recorder.goals.append(
                goal(f"Sluice / sort time at {name}", s[name]["ratio"], WIDE_TIME_GOALS[shape], at_most=True)
            )
        if name.startswith("wide") and shape in WIDE_FETCH_WAIT_GOALS:
            recorder.goals.append(
                goal(
                    f"reducers' summed fetch wait, Sluice / sort, at {name}",
                    s[name]["fetch_wait_ratio"],
                    WIDE_FETCH_WAIT_GOALS[shape],
                    at_most=True,
                )
            )
        if name.startswith("wide") and shape == SERVICE_SHAPE and "service_ratio" in s[name]:
            recorder.goals.append(
                goal(
                    f"read through the node service / executor-served time (Sluice) at {name}",
                    s[name]["service_ratio"],
                    SERVICE_GOAL,
                    at_most=True,
                )
            )
        if name.startswith("growth") and shape == GROWTH_SHAPES[-1]:
            recorder.goals.append(
                goal(f"Sluice / sort time at {name}", s[name]["ratio"], GROWTH_TIME_GOAL, at_most=True)
            )
        if name.startswith("extreme"):
            # The goal is to complete; the time ratio is reported, without a target.
            recorder.goals.append(
                goal(f"Sluice completes {name}", float(s[name]["completed"]["sluice"]), 1.0, at_most=False)
            )
    # Control messages per reducer beyond the frames it received: at most 4 per executor.
    beyond = [
        v["fan_in"]["control_messages_per_reducer"] - v["fan_in"]["remote_frames_per_reducer"]
        for n, v in s.items()
        if n.startswith(("wide", "growth"))
        and v["fan_in"]["control_messages_per_reducer"] == v["fan_in"]["control_messages_per_reducer"]
    ]
    if beyond:
        recorder.goals.append(
            goal(
                "control messages per reducer minus remote frames received (most over the wide shapes)",
                max(beyond),
                4.0 * EXECUTORS,
                at_most=True,
            )
        )
    peaks = [v["network_peak_over_budget"] for v in s.values() if "network_peak_over_budget" in v]
    if peaks:
        recorder.goals.append(goal("Sluice's peak network memory / budget (any shape)", max(peaks), 1.0, at_most=True))
    # Every Sluice answer against the sort shuffle's of the same application spec and round; an
    # answer without the other's to compare with, against what is known of it: the rows it counted.
    rows_of = {c["name"]: int(c["rows"]) for c in config_list}
    by_round = {(r["round"], r["contender"], tuple(r["runs"])): r for r in recorder.runs}
    for r in recorder.runs:
        if r["contender"] == FLOOR:
            continue  # moves nothing: its answers are wrong by design
        other = by_round.get((r["round"], "sluice" if r["contender"] == "sort" else "sort", tuple(r["runs"])))
        for name, run in r["runs"].items():
            if run.get("error") or name not in rows_of:
                continue  # reported as a failure
            theirs = None if other is None else other["runs"][name]
            if theirs is not None and not theirs.get("error"):
                diff = difference(theirs["answer"], run["answer"]) if r["contender"] != "sort" else ""
                if diff:
                    who = "" if r["contender"] == "sluice" else f"{r['contender']}, "
                    recorder.mismatches.append(f"round {r['round']}, {who}{name}: {diff}")
            elif counted_rows(run["answer"]) != rows_of[name]:
                recorder.mismatches.append(
                    f"round {r['round']}, {r['contender']}, {name}: counted {counted_rows(run['answer'])} rows "
                    f"of {rows_of[name]} (the other contender gave no answer)"
                )


def counted_rows(answer: Any) -> Optional[int]:
    """The rows :func:`sluice_bench.jobs.scale_job` counted (its answer: one row of groups, rows
    and checksum), None when the answer has no such row."""
    try:
        return int(answer[0][1])
    except (TypeError, IndexError, ValueError):
        return None


def print_summary(recorder: Recorder, path: Path, chart: Path) -> None:
    print(
        f"\n{'config':<18}{'rows':>11}{'sluice s':>10}{'sort s':>9}{'ratio':>7}{'growth sluice':>15}{'growth sort':>13}"
        f"{'net peak/budget MiB':>22}{'cpu s/GB sluice':>17}{'sort':>7}{'cpu ratio':>10}"
        f"{'wait ratio':>11}{'ctrl/reducer':>13}{'frames/reducer':>15}{'completed sluice/sort':>23}"
    )
    for name, v in recorder.summary["configs"].items():
        memory = (
            f"{v['network_peak_bytes'] / MIB:.1f}/{v['network_budget_bytes'] / MIB:.0f}"
            if "network_peak_bytes" in v
            else "-"
        )
        print(
            f"{name:<18}{v['rows']:>11,}{v['sluice_s']:>10.2f}{v['sort_s']:>9.2f}{v['ratio']:>7.2f}"
            f"{v.get('growth_sluice', float('nan')):>15.2f}{v.get('growth_sort', float('nan')):>13.2f}{memory:>22}"
            f"{v['cpu']['sluice']['process_cpu_s_per_gb']:>17.1f}{v['cpu']['sort']['process_cpu_s_per_gb']:>7.1f}"
            f"{v['cpu']['ratio']:>10.2f}{v['fetch_wait_ratio']:>11.2f}"
            f"{v['fan_in']['control_messages_per_reducer']:>13.1f}{v['fan_in']['remote_frames_per_reducer']:>15.1f}"
            f"{'/'.join('yes' if v['completed'][k] else 'NO' for k in ('sluice', 'sort')):>23}"
        )
    for name, v in recorder.summary["configs"].items():
        if "service_s" in v:
            ratio_text = f"service / sluice {v['service_ratio']:.2f}"
            primed = recorder.summary.get("service_priming", {}).get(name, {}).get("seconds")
            priming = f" (its priming application, unmeasured: {primed:.2f} s)" if primed is not None else ""
            print(f"{name:<18} through the node service: {v['service_s']:.2f} s, {ratio_text}{priming}")
    for name, v in recorder.summary["configs"].items():
        if "floor_s" in v:
            floor = f"{v['floor_s']:.2f} s, floor / sort {v['floor_ratio']:.2f}"
            print(f"{name:<18} floor (a shuffle that moves nothing): {floor}")
    for name, v in recorder.summary["configs"].items():
        driver = ", ".join(f"{k} {cpu:.1f} s" for k, cpu in v.get("driver_cpu_s", {}).items())
        print(f"{name:<18} driver CPU (median): {driver}")
    print(
        f"most TCP connections per executor pair (one direction): {recorder.summary['max_connections_per_pair']}"
        f" (the sort shuffle's, to block managers: {recorder.summary.get('sort_max_connections_per_pair', '-')})"
    )
    for g in recorder.goals:
        bound = "<=" if g["at_most"] else ">="
        print(f"goal {g['goal']} {bound} {g['target']}: {g['value']:.2f} -> {'met' if g['met'] else 'MISSED'}")
    for f in recorder.summary["failures"]:
        print("FAILED: " + f.splitlines()[0][:400])
    for m in recorder.mismatches:
        print("MISMATCH: " + m)
    print(f"result: {path}\nchart: {chart}")
