"""The benchmarks' command, ``sluice-bench NAME ...``, also run as ``sluice bench NAME ...``:

    sluice-bench NAME [--rounds N] [--quick] [--out DIR] [--replot] [--option NAME=VALUE ...]
    sluice-bench jar        the path of the benchmark jar (sluice-bench.jar)

NAME is one of ``batch``, ``transport``, ``latency``, ``memory``, ``scale``, ``cluster``, ``allocation``;
``sluice-bench NAME --help`` lists each one's own options. Results go to ``docs/benchmarks/`` unless ``--out`` says
otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from sluice_bench import BENCHMARKS
from sluice_bench._jars import bench_jar_path
from sluice_bench.errors import BenchError

HELP = {
    "batch": "a ~1 GB shuffle-heavy job and TPC-H SF1 (22 queries), Sluice vs the sort shuffle",
    "transport": "throughput per buffer timeout (Flink's latency vs throughput figure) and vs iperf3",
    "latency": "Real-Time Mode p50/p99/p99.9 latency, Sluice vs Spark's streaming shuffle",
    "memory": "peak network memory against the budget while a 20x larger shuffle runs",
    "scale": "cost as data, partitions and map tasks grow (--groups extreme: 100,000 maps x 200 reducers "
    "and 20,000 x 2,000, hours), and TCP connections per executor pair",
    "cluster": "the batch jobs on dev/cluster's multi-host cluster per link rate, and each link's use (root)",
    "allocation": "executor-seconds of a bursty job under dynamic allocation on dev/cluster: sort + Spark's "
    "shuffle service, Sluice + shuffle tracking, Sluice + its node service (root)",
}


def main(argv: Optional[Sequence[str]] = None, prog: str = "sluice-bench") -> int:
    """Runs the benchmark ``argv`` names (``sys.argv[1:]`` by default); ``prog`` is how the user
    called it, for help and errors (``sluice bench`` when the ``sluice`` command delegates)."""
    args = list(sys.argv[1:] if argv is None else argv)
    parsed = parser(prog).parse_args(args)
    if parsed.benchmark == "jar":
        try:
            print(bench_jar_path())
        except FileNotFoundError as e:
            raise SystemExit(f"{prog} jar: {e}") from None
        return 0
    if parsed.rounds is not None and parsed.rounds < 1:
        raise SystemExit(f"{prog}: --rounds must be at least 1")
    for option in getattr(parsed, "option", []):
        if "=" not in option:
            raise SystemExit(f"{prog}: --option takes NAME=VALUE, got {option!r}")
    module = _module(parsed.benchmark)
    if parsed.replot:
        name = module.result_name(parsed) if hasattr(module, "result_name") else parsed.benchmark
        saved = Path(parsed.out) / f"{name}.json"
        if not saved.is_file():
            raise SystemExit(f"{prog} {parsed.benchmark} --replot: {saved} does not exist")
        print(module.draw(Path(parsed.out) / f"{name}.png", json.loads(saved.read_text())))
        return 0
    try:
        # The result records the command as `sluice bench ...`, which reruns it either way.
        code: int = module.run(parsed, ["bench", *args])
    except BenchError as e:
        raise SystemExit(f"{prog} {parsed.benchmark}: {e}") from None
    return code


def parser(prog: str = "sluice-bench") -> argparse.ArgumentParser:
    bench = argparse.ArgumentParser(
        prog=prog,
        description="Runs a benchmark, alternating Sluice with Spark's own shuffle over several rounds, "
        "and writes NAME.json and NAME.png (into docs/benchmarks/ unless --out says otherwise).",
    )
    names = bench.add_subparsers(dest="benchmark", required=True, metavar="NAME")
    for name in BENCHMARKS:
        text = HELP[name]
        sub = names.add_parser(name, help=text, description=text)
        sub.add_argument("--rounds", type=int, help="rounds (each contender once per round; default 3, --quick 1)")
        sub.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of the code paths")
        sub.add_argument("--out", default="docs/benchmarks", help="where the JSON and PNG go (default %(default)s)")
        sub.add_argument("--replot", action="store_true", help="only redraw NAME.png from the NAME.json in --out")
        sub.add_argument(
            "--option",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="a Sluice option for Sluice's runs, by its Python name (e.g. buffers_per_channel=8); repeatable",
        )
        _module(name).add_arguments(sub)
    names.add_parser("jar", help="print the path of the benchmark jar (sluice-bench.jar)")
    return bench


def _module(name: str) -> Any:
    return importlib.import_module(f"sluice_bench.{name}")


if __name__ == "__main__":
    sys.exit(main())
