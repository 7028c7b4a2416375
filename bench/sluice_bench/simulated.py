"""``sluice bench scale --simulated``: what one executor costs as the cluster widens, on a cluster
simulated in one JVM (``io.sluice.bench.SimulatedClusterBenchmark``): N executors, each a
production Sluice network stack with its own memory, server on loopback, local dir and threads,
run one shuffle of 4 map tasks and 2 reduce tasks per executor. Per executor it reports the heap
it retains, its gates' peak network memory, index bytes read against needed, its connections,
descriptors and threads, at 16, 64 and 256 executors (each count in a JVM of its own).

Then index reads at 4,000 maps x 1,000 reducers on 2 executors, at index cache sizes from none to
1 GiB: bytes read from index files over the bytes readers needed (goal: at most 1.2 at every
size). And what each executor's periodic report costs the driver
(``org.apache.spark.shuffle.sluice.bench.ReportCostBenchmark``): bytes, encode and decode
microseconds of reports of 1, 8 and 32 tasks, Java-serialised against Sluice's report codec.

One JVM holds every simulated executor, so the process's descriptor limit bounds how many
executor pairs can connect: where the full mesh does not fit, only some executors run reducers
and each prepares connections to fewer peers; the result records both (``reduce_executors``,
``prepare_peers``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from sluice_bench import charts
from sluice_bench._jars import bench_jar_path
from sluice_bench.args import sluice_options
from sluice_bench.errors import BenchError
from sluice_bench.results import Recorder, command_line, save_result, subtitle_of
from sluice_bench.stats import goal
from sluice_bench.transport import parse_runs

NAME = "scale-simulated"
EXECUTOR_COUNTS = (16, 64, 256)
QUICK_EXECUTOR_COUNTS = (4, 8)
INDEX_SHAPE = (4000, 1000)
QUICK_INDEX_SHAPE = (200, 100)
INDEX_CACHE_SIZES = ("0", "1m", "32m", "1g")
QUICK_INDEX_CACHE_SIZES = ("0", "64k", "32m")
INDEX_RATIO_GOAL = 1.2
MAIN = "io.sluice.bench.SimulatedClusterBenchmark"
REPORTS_MAIN = "org.apache.spark.shuffle.sluice.bench.ReportCostBenchmark"
TIMEOUT_S = 4 * 3600


def executor_counts(text: Optional[str], quick: bool) -> Tuple[int, ...]:
    """The executor counts ``--executors`` names (default 16, 64 and 256; quick 4 and 8)."""
    if not text:
        return QUICK_EXECUTOR_COUNTS if quick else EXECUTOR_COUNTS
    try:
        counts = tuple(int(c) for c in text.split(",") if c.strip())
    except ValueError:
        raise BenchError(f"--executors takes counts separated by commas, not {text!r}") from None
    if not counts or min(counts) < 2:
        raise BenchError(f"--executors takes counts of at least 2, not {text!r}")
    return counts


def plans(args: argparse.Namespace) -> List[Tuple[str, List[str]]]:
    """The JVM runs ``args`` asks for, in order: one per executor count (group ``width``), then
    the index shape at every cache size (group ``index``), each as SimulatedClusterBenchmark's
    arguments, then the reports' costs (group ``reports``, ReportCostBenchmark, no arguments)."""
    from sluice_bench.transport import option_arguments

    quick = bool(args.quick)
    options = option_arguments(sluice_options(args))
    out = [("width", ["--executors", str(n), *options]) for n in executor_counts(args.executors, quick)]
    maps, reducers = QUICK_INDEX_SHAPE if quick else INDEX_SHAPE
    sizes = QUICK_INDEX_CACHE_SIZES if quick else INDEX_CACHE_SIZES
    index = ["--executors", "2", "--maps", str(maps), "--reducers", str(reducers), "--slots", "2"]
    out.append(("index", [*index, "--index-cache-sizes", ",".join(sizes), *options]))
    out.append(("reports", []))
    return out


def java_command(args: Sequence[str], main: str = MAIN) -> List[str]:
    """``java`` running ``main`` (SimulatedClusterBenchmark) from the benchmark jar, with the plugin
    jar and pyspark's jars; 3 GiB of heap and 2 GiB of direct memory hold 256 executors."""
    import pyspark
    import sluice

    from sluice_bench.transport import SPARK_JVM_ARGS

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    classpath = os.pathsep.join([bench_jar_path(), sluice.jar_path(), f"{jars}/*"])
    return ["java", *SPARK_JVM_ARGS, "-Xmx3g", "-XX:MaxDirectMemorySize=2g", "-cp", classpath, main, *args]


def main_of(group: str) -> str:
    """The benchmark main a group's runs use."""
    return REPORTS_MAIN if group == "reports" else MAIN


def run(args: argparse.Namespace, argv: Optional[List[str]] = None) -> int:
    todo = plans(args)
    recorder = Recorder(
        NAME,
        command_line(argv),
        {
            "rounds": 1,
            "quick": bool(args.quick),
            "sluice_options": sluice_options(args),
            "commands": [" ".join(java_command(a, main_of(g))) for g, a in todo],
        },
    )
    for group, bench_args in todo:
        print(f"bench scale --simulated: {group} {' '.join(bench_args)}", flush=True)
        main = main_of(group)
        done = subprocess.run(java_command(bench_args, main), capture_output=True, text=True, timeout=TIMEOUT_S)
        runs = parse_runs(done.stdout)
        if done.returncode != 0 or not runs:
            raise BenchError(f"{main.rsplit('.', 1)[-1]} failed (exit {done.returncode}): {done.stderr[-2000:]}")
        recorder.runs += [dict(r, group=group) for r in runs]
        summarize(recorder)
        path, chart = save_result(recorder, args.out, NAME, draw)  # after every run: a long one keeps what it has
    print_summary(recorder, path, chart)
    return 0 if all(g["met"] for g in recorder.goals) else 1


def summarize(recorder: Recorder) -> None:
    """Per executor count, each per-executor figure's median and maximum over the executors; per
    index cache size, index bytes read over needed; and the goals."""
    width: Dict[str, Dict[str, Any]] = {}
    for r in recorder.runs:
        if r["group"] != "width":
            continue
        per = r["per_executor"]
        width[str(r["executors"])] = {
            "reduce_executors": r["reduce_executors"],
            "prepare_peers": r["prepare_peers"],
            "heap_retained_per_executor": r["heap_retained_per_executor"],
            "other_descriptors_per_executor": r["other_descriptors_per_executor"],
            "threads_max": per["threads"]["max"],
            "fd_files_max": per["fd_files"]["max"],
            "fd_sockets_max": per["fd_sockets"]["max"],
            "client_connections_max": per["client_connections"]["max"],
            "peak_gate_bytes_max": per["peak_gate_bytes"]["max"],
            "index_cache_bytes_max": per["index_cache_bytes"]["max"],
            "index_read_ratio": r["index_read_ratio"],
            "prepared_fraction": r["read_from_prepared"] / r["read_from"] if r["read_from"] else None,
            "buffers_and_threads_back": r["buffers_and_threads_back"],
            "seconds": {"start": r["start_s"], "map": r["map_s"], "reduce": r["reduce_s"]},
        }
    index = {
        r["index_cache_size"]: {
            "maps": r["maps"],
            "reducers": r["reducers"],
            "index_bytes_read": r["index_bytes_read"],
            "index_bytes_needed": r["index_bytes_needed"],
            "ratio": r["index_read_ratio"],
            "reduce_s": r["reduce_s"],
        }
        for r in recorder.runs
        if r["group"] == "index"
    }
    reports = {
        str(r["tasks"]): {k: r[k] for k in r if k.startswith(("java_", "codec_"))}
        for r in recorder.runs
        if r["group"] == "reports"
    }
    recorder.summary = {"width": width, "index": index, "reports": reports}
    recorder.goals = []
    if index:
        worst = max(v["ratio"] for v in index.values())
        recorder.goals.append(
            goal("index bytes read / needed, worst cache size", worst, INDEX_RATIO_GOAL, at_most=True)
        )
    prepared = [v["prepared_fraction"] for v in width.values() if v["prepared_fraction"] is not None]
    if "64" in width and width["64"]["prepared_fraction"] is not None:
        recorder.goals.append(
            goal(
                "executors read from with a prepared connection, 64 executors",
                width["64"]["prepared_fraction"],
                1.0,
                at_most=False,
            )
        )
    elif prepared:
        recorder.goals.append(goal("executors read from with a prepared connection", min(prepared), 1.0, at_most=False))
    back = [v["buffers_and_threads_back"] for v in width.values()]
    if back:
        recorder.goals.append(
            goal("runs whose buffers and threads all came back", float(sum(back)), float(len(back)), at_most=False)
        )


def draw(path: Path, result: Dict[str, Any]) -> Path:
    """The chart of a result (also from a saved JSON: ``sluice bench scale --simulated --replot``)."""
    s = result["summary"]
    counts = sorted(int(n) for n in s["width"])
    figures = {
        "threads (max)": [float(s["width"][str(n)]["threads_max"]) for n in counts],
        "file descriptors (max)": [float(s["width"][str(n)]["fd_files_max"]) for n in counts],
        "other descriptors (mean)": [float(s["width"][str(n)]["other_descriptors_per_executor"]) for n in counts],
        "gate network memory, KiB (max)": [float(s["width"][str(n)]["peak_gate_bytes_max"]) / 1024 for n in counts],
        "heap retained, MiB (mean)": [
            float(s["width"][str(n)]["heap_retained_per_executor"]) / (1 << 20) for n in counts
        ],
    }
    ratios = {size: float(v["ratio"]) for size, v in s["index"].items()}
    return charts.simulated_chart(path, counts, figures, ratios, INDEX_RATIO_GOAL, subtitle_of(result))


def print_summary(recorder: Recorder, path: Path, chart: Path) -> None:
    s = recorder.summary
    print(
        f"\n{'executors':>9}{'reducing':>9}{'prepare':>8}{'threads':>8}{'files':>6}{'sockets':>8}{'other fd':>9}"
        f"{'gate KiB':>9}{'heap MiB':>9}{'index r/n':>10}{'prepared':>9}{'back':>6}"
    )
    for n, v in sorted(s["width"].items(), key=lambda kv: int(kv[0])):
        prepared = "-" if v["prepared_fraction"] is None else f"{v['prepared_fraction']:.2f}"
        print(
            f"{n:>9}{v['reduce_executors']:>9}{v['prepare_peers']:>8}{v['threads_max']:>8.0f}{v['fd_files_max']:>6.0f}"
            f"{v['fd_sockets_max']:>8.0f}{v['other_descriptors_per_executor']:>9.1f}"
            f"{v['peak_gate_bytes_max'] / 1024:>9.0f}{v['heap_retained_per_executor'] / (1 << 20):>9.2f}"
            f"{v['index_read_ratio']:>10.3f}{prepared:>9}{'yes' if v['buffers_and_threads_back'] else 'NO':>6}"
        )
    for size, v in s["index"].items():
        print(
            f"index cache {size:>5}: {v['maps']} maps x {v['reducers']} reducers on 2 executors, "
            f"read {v['index_bytes_read']:,} of {v['index_bytes_needed']:,} bytes needed: {v['ratio']:.3f}"
        )
    for tasks, v in sorted(s.get("reports", {}).items(), key=lambda kv: int(kv[0])):
        print(
            f"a report of {tasks:>2} tasks: Java-serialised {v['java_bytes']:,} bytes, "
            f"encode {v['java_encode_us']:.1f} us, decode {v['java_decode_us']:.1f} us; "
            f"Sluice's codec {v['codec_bytes']:,} bytes, "
            f"encode {v['codec_encode_us']:.1f} us, decode {v['codec_decode_us']:.1f} us"
        )
    for g in recorder.goals:
        bound = "<=" if g["at_most"] else ">="
        print(f"goal {g['goal']} {bound} {g['target']}: {g['value']:.2f} -> {'met' if g['met'] else 'MISSED'}")
    print(f"result: {path}\nchart: {chart}")
