"""``sluice bench transport``: what one connection between two executors carries, per buffer
timeout, measured by ``io.sluice.bench.TransportBenchmark`` (two executors in one JVM over
loopback), alternated with ``iperf3`` over loopback as the ceiling of one TCP connection.

The chart redraws "A Deep-Dive into Flink's Network Stack"'s "Latency vs. Throughput" figure: Sluice's
throughput at each buffer
timeout as a fraction of its throughput at 100 ms, beside Flink 1.5's published ratios.

Each run also records the CPU time of the whole benchmark process per buffer moved (CPU-microseconds
per 32 KiB buffer, end to end: producer, both event loops, consumer, GC), which on a shared machine
says more than Gbit/s.

Goals: 1 ms reaches at least 90 % of the 100 ms throughput; one connection at least 80 % of
iperf3's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from sluice_bench import charts
from sluice_bench._jars import bench_jar_path
from sluice_bench.apps import run_plan
from sluice_bench.args import sluice_options
from sluice_bench.errors import BenchError
from sluice_bench.results import Recorder, command_line, save_result, subtitle_of
from sluice_bench.stats import alternation, goal, median, ratio

TIMEOUTS = (0, 1, 2, 5, 10, 100)
# The article's figure: Flink 1.5+ throughput at each buffer timeout, as a fraction of 100 ms.
FLINK_1_5 = {0: 0.39, 1: 0.75, 2: 0.79, 5: 0.86, 100: 1.0}

# The --add-opens Spark's launcher gives its JVMs on Java 17 (build.gradle's sparkJvmArgs).
SPARK_JVM_ARGS = [
    "-XX:+IgnoreUnrecognizedVMOptions",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.cs=ALL-UNNAMED",
    "--add-opens=java.base/sun.security.action=ALL-UNNAMED",
    "--add-opens=java.base/sun.util.calendar=ALL-UNNAMED",
    "-Djdk.reflect.useDirectMethodHandle=false",
    "-Dio.netty.tryReflectionSetAccessible=true",
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, help="measured seconds per configuration (default 3; quick 1)")
    parser.add_argument("--record-sizes", default=None, help="record sizes in bytes (default 100,10240; quick 10240)")
    parser.add_argument("--channels", default="1", help="channels (subpartitions) on the connection (default 1)")
    parser.add_argument("--iperf-seconds", type=int, help="seconds per iperf3 run (default 5; quick 1)")
    parser.add_argument(
        "--pipelined-checksum",
        choices=("on", "off"),
        default="on",
        help="a CRC32C with every buffer (Spark's spark.shuffle.streaming.checksum.enabled; default on, as Spark)",
    )


def java_command(args: List[str]) -> List[str]:
    """``java`` running TransportBenchmark from the benchmark jar, with the plugin jar and
    pyspark's jars."""
    import pyspark
    import sluice

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    classpath = os.pathsep.join([bench_jar_path(), sluice.jar_path(), f"{jars}/*"])
    return [
        "java",
        *SPARK_JVM_ARGS,
        "-Xmx1g",
        "-XX:MaxDirectMemorySize=1g",
        "-cp",
        classpath,
        "io.sluice.bench.TransportBenchmark",
        *args,
    ]


def checksum_arguments(args: argparse.Namespace) -> List[str]:
    """``--pipelined-checksum`` as TransportBenchmark's argument: Spark's setting for a CRC32C with
    every pipelined buffer (on unless ``off``)."""
    enabled = getattr(args, "pipelined_checksum", "on") != "off"
    return ["--spark.shuffle.streaming.checksum.enabled", "true" if enabled else "false"]


def option_arguments(options: Dict[str, Any]) -> List[str]:
    """Sluice options by their Python names as TransportBenchmark's ``--spark.sluice.KEY VALUE``
    arguments, checked (an unknown name or a bad value is refused, naming it)."""
    from sluice import _options

    try:
        settings = _options.spark_settings(options)
    except ValueError as e:
        raise BenchError(str(e)) from None
    return [arg for key, value in settings.items() for arg in (f"--{key}", value)]


def parse_runs(output: str) -> List[Dict[str, Any]]:
    """The JSON lines of kind ``run`` a benchmark main prints (TransportBenchmark,
    SimulatedClusterBenchmark); other lines are its log."""
    runs: List[Dict[str, Any]] = []
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if data.get("kind") == "run":
                runs.append(data)
    return runs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def iperf3(seconds: int) -> Tuple[float, float]:
    """Gbit/s of one ``iperf3`` TCP stream over loopback with 32 KiB writes, and the CPU-microseconds
    both ends spent per 32 KiB moved (iperf3's own CPU accounting of sender and receiver)."""
    tool = shutil.which("iperf3")
    if tool is None:
        raise BenchError("iperf3 is missing: apt-get install iperf3 (dev/env.sh does so)")
    port = free_port()
    server = subprocess.Popen([tool, "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        done = subprocess.run(
            [tool, "-c", "127.0.0.1", "-p", str(port), "-l", "32K", "-t", str(seconds), "-J"],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
        )
        if done.returncode != 0:
            raise BenchError(f"iperf3 failed: {done.stdout[-500:]} {done.stderr[-500:]}")
        end = json.loads(done.stdout)["end"]
        received = end["sum_received"]
        cpu = end["cpu_utilization_percent"]
        chunks = float(received["bytes"]) / 32768
        cpu_seconds = (float(cpu["host_total"]) + float(cpu["remote_total"])) / 100 * float(received["seconds"])
        return float(received["bits_per_second"]) / 1e9, cpu_seconds * 1e6 / chunks if chunks else 0.0
    finally:
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


def run(args: argparse.Namespace, argv: Optional[List[str]] = None) -> int:
    quick = bool(args.quick)
    rounds = args.rounds or (1 if quick else 3)
    seconds = args.seconds or (1.0 if quick else 3.0)
    sizes = args.record_sizes or ("10240" if quick else "100,10240")
    iperf_seconds = args.iperf_seconds or (1 if quick else 5)
    bench_args = [
        "--seconds",
        str(seconds),
        "--warmup",
        "0.5" if quick else "1",
        "--jvm-warmup",
        "0.2" if quick else "1",
        "--repeats",
        "1",
        "--channels",
        args.channels,
        "--record-sizes",
        sizes,
        "--timeouts",
        ",".join(str(t) for t in TIMEOUTS),
        "--modes",
        "remote",
        *checksum_arguments(args),
        *option_arguments(sluice_options(args)),
    ]
    recorder = Recorder(
        "transport",
        command_line(argv),
        {
            "rounds": rounds,
            "quick": quick,
            "sluice_options": sluice_options(args),
            "pipelined_checksum": getattr(args, "pipelined_checksum", "on"),
            "transport_benchmark_command": " ".join(java_command(bench_args)),
            "iperf3_command": f"iperf3 -s -1 -p PORT & iperf3 -c 127.0.0.1 -p PORT -l 32K -t {iperf_seconds} -J",
        },
    )
    plan = alternation(("iperf3", "sluice"), rounds)
    iperf: List[float] = []
    iperf_cpu: List[float] = []
    sluice_runs: List[Dict[str, Any]] = []

    def one(item: Tuple[int, str]) -> None:
        round_number, contender = item
        if contender == "iperf3":
            gbps, cpu_us = iperf3(iperf_seconds)
            iperf.append(gbps)
            iperf_cpu.append(cpu_us)
            recorder.runs.append(
                {"round": round_number, "contender": "iperf3", "gbps": gbps, "cpu_us_per_32kib": cpu_us}
            )
            return
        done = subprocess.run(java_command(bench_args), capture_output=True, text=True, timeout=3600)
        runs = parse_runs(done.stdout)
        if done.returncode != 0 or not runs:
            raise BenchError(f"TransportBenchmark failed (exit {done.returncode}): {done.stderr[-2000:]}")
        for r in runs:
            r["round"] = round_number
        sluice_runs.extend(runs)
        recorder.runs.append({"round": round_number, "contender": "sluice", "runs": runs})

    run_plan(plan, "bench transport", lambda i: f"round {i[0]}: {i[1]}", one)
    summarize(recorder, iperf, sluice_runs, iperf_cpu)
    path, chart = save_result(recorder, args.out, "transport", draw)
    print_summary(recorder, path, chart)
    return 0


def series_name(channels: int, record_size: int) -> str:
    size = f"{record_size // 1024} KiB" if record_size >= 1024 else f"{record_size} B"
    return f"Sluice, {channels} ch, {size} records"


def summarize(
    recorder: Recorder, iperf: List[float], runs: List[Dict[str, Any]], iperf_cpu: Optional[List[float]] = None
) -> None:
    s = recorder.summary
    s["iperf3_gbps"] = median(iperf)
    if iperf_cpu:
        s["iperf3_cpu_us_per_32kib"] = median(iperf_cpu)
    table: Dict[str, Dict[str, Any]] = {}
    for key in sorted({(int(r["channels"]), int(r["recordSize"])) for r in runs}):
        name = series_name(*key)
        by_timeout = {
            t: median(
                [r["gbps"] for r in runs if (r["channels"], r["recordSize"]) == key and int(r["bufferTimeoutMs"]) == t]
            )
            for t in TIMEOUTS
        }
        base = by_timeout[100]

        def median_of(field: str, t: int, key: Tuple[int, int] = key) -> float:
            return median(
                [
                    float(r.get(field, 0.0))
                    for r in runs
                    if (r["channels"], r["recordSize"]) == key and int(r["bufferTimeoutMs"]) == t
                ]
            )

        table[name] = {
            "gbps": {str(t): v for t, v in by_timeout.items()},
            "cpu_us_per_buffer": {str(t): median_of("cpuMicrosPerBuffer", t) for t in TIMEOUTS},
            "buffers_per_s": {str(t): median_of("buffersPerSec", t) for t in TIMEOUTS},
            "bytes_per_buffer": {str(t): median_of("bytesPerBuffer", t) for t in TIMEOUTS},
            "fraction_of_100ms": {str(t): ratio(v, base) for t, v in by_timeout.items()},
            "fraction_of_iperf3_at_100ms": ratio(base, s["iperf3_gbps"]),
            "best_fraction_of_iperf3": ratio(max(by_timeout.values()), s["iperf3_gbps"]),
        }
    s["series"] = table
    s["flink_1_5_fraction_of_100ms"] = {str(t): v for t, v in FLINK_1_5.items()}
    if table:
        worst_1ms = min(v["fraction_of_100ms"]["1"] for v in table.values())
        best_iperf = max(v["best_fraction_of_iperf3"] for v in table.values())
        recorder.goals.append(
            goal("1 ms throughput / 100 ms throughput (worst series)", worst_1ms, 0.90, at_most=False)
        )
        recorder.goals.append(goal("one connection / iperf3 (best series)", best_iperf, 0.80, at_most=False))


def draw(path: Path, result: Dict[str, Any]) -> Path:
    """The chart of a result (also from a saved JSON: ``sluice bench transport --replot``)."""
    s = result["summary"]
    series: Dict[str, Sequence[float]] = {
        name: [float(v["fraction_of_100ms"][str(t)]) for t in TIMEOUTS] for name, v in s["series"].items()
    }
    iperf_fraction = {name.replace("Sluice, ", ""): v["fraction_of_iperf3_at_100ms"] for name, v in s["series"].items()}
    subtitle = f"iperf3 {s['iperf3_gbps']:.1f} Gbit/s, " + subtitle_of(result)
    options = result["settings"].get("sluice_options") or {}
    if options:
        subtitle += "\n" + ", ".join(f"{k}={v}" for k, v in sorted(options.items()))
    return charts.transport_chart(path, TIMEOUTS, series, FLINK_1_5, iperf_fraction, subtitle)


def print_summary(recorder: Recorder, path: Path, chart: Path) -> None:
    s = recorder.summary
    print(f"\niperf3: {s['iperf3_gbps']:.1f} Gbit/s (median)")
    if "iperf3_cpu_us_per_32kib" in s:
        print(f"iperf3: {s['iperf3_cpu_us_per_32kib']:.1f} CPU-us per 32 KiB, sender and receiver (median)")
    header = "".join(f"{str(t) + ' ms':>9}" for t in TIMEOUTS)
    print(f"{'series':<34}{header}   (Gbit/s of record payload, median)")
    for name, v in s["series"].items():
        print(f"{name:<34}" + "".join(f"{v['gbps'][str(t)]:>9.2f}" for t in TIMEOUTS))
        print(f"{'  % of 100 ms':<34}" + "".join(f"{v['fraction_of_100ms'][str(t)] * 100:>8.0f}%" for t in TIMEOUTS))
        if "cpu_us_per_buffer" in v:
            print(f"{'  CPU-us per buffer':<34}" + "".join(f"{v['cpu_us_per_buffer'][str(t)]:>9.1f}" for t in TIMEOUTS))
    for g in recorder.goals:
        print(f"goal {g['goal']} >= {g['target']}: {g['value']:.2f} -> {'met' if g['met'] else 'MISSED'}")
    print(f"result: {path}\nchart: {chart}")
