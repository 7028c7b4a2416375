"""The headline numbers of ``README.md`` and ``docs/benchmarks.md``, generated from the result JSON.

Every number a user decides by (Sluice's time against the sort shuffle's, Real-Time Mode's p99,
peak network memory, one connection against iperf3) is read here from the JSON file of the run it
comes from, with that run's own goal, date, rounds, load and machine, and rendered into the two
pages between markers::

    <!-- headlines:begin ... -->  the machine, the table of headline numbers, the newer runs not used
    <!-- slower:begin ... -->     the cases where Sluice was slower than the sort shuffle

The generator refuses what the JSON does not back: a goal the run did not record, a word in a row
that claims more than the run shows (``quiet`` over a loaded machine, ``median`` of one round,
``hosts`` for network namespaces on one machine), a newer run of the same benchmark passed over
without a reason (or a reason kept after the newer run is gone), and phrases no result file can
back anywhere on the two pages (:data:`UNBACKED_PHRASES`).

``python -m sluice_bench.headlines`` rewrites both blocks in both pages; ``--check`` exits 1 when a
committed block differs from what the JSON says, and either fails with the reason when a claim is
not backed (``tests/test_bench.py`` runs the same check).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

# Pages holding the blocks, relative to the repository root; the second also lists the newer runs not used.
PAGES = ("README.md", "docs/benchmarks.md")
NEWER_LISTED_ON = "docs/benchmarks.md"
RESULTS = Path("docs") / "benchmarks"
# Where newer runs of a headline's benchmark are looked for: the cited results and the history's.
SEARCHED = (RESULTS, Path("bench") / "results")

# A case counts as slower when Sluice took at least this much of the sort shuffle's time.
SLOWER_FROM = 1.05
# A run is "quiet" when the 1-minute load average before it was below this (half of the 2 cores).
QUIET_LOAD = 1.0
# Phrases no result file can back: the JSON records the load before and after a run, not what else ran.
UNBACKED_PHRASES = ("nothing else running", "each from the latest run")

BATCH = "batch-2026-11-26-files.json"  # the heavy job, both settings
# TPC-H SF1, each setting's latest run (sluice bench batch --no-heavy --settings NAME --rounds 3, or 2 for
# off64 on 30 November; at the defaults with --service, whose third contender does not change Sluice's and
# the sort shuffle's turns).
TPCH = {"off64": "batch-sf1-off64-2026-11-30-codec.json", "defaults": "batch-service.json"}
WIDE = "scale-wide-2026-11-29.json"
WIDE_HOST_LOCAL = "scale-wide-host-local-2026-11-29.json"  # 1500 x 400 and 6000 x 400, --host-local
GROWTH = "scale-growth-2026-11-26-files.json"
LATENCY = "latency-2026-11-24.json"
MEMORY = "memory.json"
TRANSPORT = "transport.json"
CLUSTER = "cluster.json"
SHA2 = "batch-sha2-2026-11-30-codec.json"  # the CPU-bound job, local executors reading across executors
SHA2_HOST_LOCAL = "batch-sha2-host-local-2026-11-29.json"  # the same, each reading the other's files (--host-local)
CLUSTER_SHA2 = "cluster-sha2-2026-11-30-window.json"  # the same across two hosts
# The first jobs of fresh applications (sluice bench batch --short --cold).
COLD = "batch-short-cold-2026-11-28.json"
_COLD_JOBS = {"repartition_1k": "its first shuffle (a repartition of 1,000 rows)", "group_by_100k": "a group-by"}

_JOBS = {"heavy": "1 GB compute-bound", "tpch": "TPC-H", "wide": "400 × 200 partitions"}
SETTINGS = {"off64": "AQE off, 64 partitions", "defaults": "Spark's defaults"}


@dataclass(frozen=True)
class Headline:
    """One row: what is measured, the JSON file, how to read the value, the goal's name in that file,
    and why newer runs of the same benchmark (listed under the table) are not this row's."""

    measure: str
    result: str
    value: Callable[[Dict[str, Any]], float]
    shown: Callable[[float], str]
    goal: Optional[str] = None
    newer: str = ""


class UnbackedClaim(ValueError):
    """A headline or a page says something its result JSON does not record."""


def _ratio(v: float) -> str:
    return f"{v:.2f}"


def _percent(v: float) -> str:
    return f"{v * 100:.0f} %"


def _batch(setting: str, key: str) -> Callable[[Dict[str, Any]], float]:
    return lambda r: float(r["summary"]["settings"][setting][key])


def _config(name: str, key: str = "ratio") -> Callable[[Dict[str, Any]], float]:
    return lambda r: float(r["summary"]["configs"][name][key])


def _cluster(rate: str, job: Optional[str]) -> Callable[[Dict[str, Any]], float]:
    def read(r: Dict[str, Any]) -> float:
        at = r["summary"]["rates"][rate]
        return float(at["total_ratio"] if job is None else at["jobs"][job]["ratio"])

    return read


def _latency_p99(contender: str) -> Callable[[Dict[str, Any]], float]:
    def read(r: Dict[str, Any]) -> float:
        for row in r["summary"]["table"]:
            if row["config"] == "both flush every 5 ms" and row["rate"] == 1000 and row["contender"] == contender:
                return float(row["shuffle_p99_ms"])
        raise KeyError(f"no {contender} row at 1000/s, both flush every 5 ms")

    return read


def _iperf3(r: Dict[str, Any]) -> float:
    return max(float(s["best_fraction_of_iperf3"]) for s in r["summary"]["series"].values())


def _memory(r: Dict[str, Any]) -> float:
    s = r["summary"]
    return float(s["sluice_peak_used_bytes"]) / float(s["sluice_configured_bytes"])


_WIDE_128K = (
    "the newer runs checked one change each, at two shapes in two rounds: "
    "spark.sluice.memory.segmentSize=128k, which wide shapes lose by (see Tuning), the credit "
    "window's start (see the CPU-bound job), the frame encoder's two writes (0.63 and 0.71), and "
    "packed frames' entries in one array (0.68 and 0.71)"
)
_HEAVY_NEWER = (
    "the 27 November run was against a sort shuffle tuned with spark.shuffle.sort.bypassMergeThreshold=0, "
    "an eighth of the rows, on a loaded machine; the runs since 29 November are another job, the CPU-bound one "
    "(its own rows)"
)

HEADLINES: Tuple[Headline, ...] = (
    Headline(
        "TPC-H SF1, 22 queries, time (AQE off, 64 partitions)",
        TPCH["off64"],
        _batch("off64", "tpch_ratio"),
        _ratio,
        "AQE off, 64 partitions: TPC-H total: Sluice time / sort time",
    ),
    Headline(
        "TPC-H SF1, 22 queries, time (Spark's defaults)",
        TPCH["defaults"],
        _batch("defaults", "tpch_ratio"),
        _ratio,
        "Spark's defaults (AQE on, 200 partitions): TPC-H total: Sluice time / sort time",
    ),
    Headline(
        "1 GB compute-bound job, time (AQE off, 64 partitions)",
        BATCH,
        _batch("off64", "heavy_ratio"),
        _ratio,
        "AQE off, 64 partitions: heavy job: Sluice time / sort time",
        newer=_HEAVY_NEWER,
    ),
    Headline(
        "1 GB compute-bound job, time (Spark's defaults)",
        BATCH,
        _batch("defaults", "heavy_ratio"),
        _ratio,
        "Spark's defaults (AQE on, 200 partitions): heavy job: Sluice time / sort time",
    ),
    Headline(
        "1500 maps × 400 reducers, time",
        WIDE,
        _config("wide 1500x400"),
        _ratio,
        "Sluice / sort time at wide 1500x400",
        newer=_WIDE_128K,
    ),
    Headline(
        "6000 maps × 400 reducers, time",
        WIDE,
        _config("wide 6000x400"),
        _ratio,
        "Sluice / sort time at wide 6000x400",
    ),
    Headline(
        "4000 maps × 200 reducers, time", WIDE, _config("wide 4000x200"), _ratio, "Sluice / sort time at wide 4000x200"
    ),
    Headline(
        "200 maps × 4000 reducers, time",
        WIDE,
        _config("wide 200x4000"),
        _ratio,
        "Sluice / sort time at wide 200x4000",
        newer=_WIDE_128K,
    ),
    Headline(
        "4000 maps × 1000 reducers, time",
        WIDE,
        _config("wide 4000x1000"),
        _ratio,
        "Sluice / sort time at wide 4000x1000",
    ),
    Headline(
        "1500 maps × 400 reducers, both shuffles reading the other executor's map outputs from its files, time",
        WIDE_HOST_LOCAL,
        _config("wide 1500x400"),
        _ratio,
        "Sluice / sort time at wide 1500x400",
    ),
    Headline(
        "1.5 GB CPU-bound job (SHA-256 of every row), time (AQE off, 64 partitions)",
        SHA2,
        _batch("off64", "heavy_ratio"),
        _ratio,
        "AQE off, 64 partitions: sha2 job: Sluice time / sort time",
    ),
    Headline(
        "the same job, both shuffles reading the other executor's map outputs from its files, time",
        SHA2_HOST_LOCAL,
        _batch("off64", "heavy_ratio"),
        _ratio,
        "AQE off, 64 partitions: sha2 job: Sluice time / sort time",
        newer="the newer runs read across executors (the row above), one of them with "
        "spark.sluice.memory.segmentSize=128k (see Tuning for CPU-bound jobs)",
    ),
    Headline(
        "the same job, 2 workers in network namespaces, links at 1 Gbit/s, time",
        CLUSTER_SHA2,
        _cluster("1gbit", None),
        _ratio,
        "1gbit: all jobs, Sluice time / sort time",
    ),
    Headline(
        "10000 maps × 1000 reducers, time",
        GROWTH,
        _config("growth 10000x1000"),
        _ratio,
        "Sluice / sort time at growth 10000x1000",
    ),
    Headline(
        "three batch jobs, 2 workers in network namespaces of this one machine, links at 1 Gbit/s, time",
        CLUSTER,
        _cluster("1gbit", None),
        _ratio,
        "1gbit: all jobs, Sluice time / sort time",
        newer="the newer runs measured the CPU-bound job alone (its own row above), one of them with "
        "spark.sluice.memory.segmentSize=128k",
    ),
    Headline(
        "the same at 10 Gbit/s links, time",
        CLUSTER,
        _cluster("10gbit", None),
        _ratio,
        "10gbit: all jobs, Sluice time / sort time",
    ),
    Headline(
        "Real-Time Mode, p99 through the shuffle, both flushing every 5 ms, 1000 rows/s",
        LATENCY,
        lambda r: _latency_p99("sluice")(r) / _latency_p99("builtin")(r),
        _ratio,
        "p99 through the shuffle, Sluice / built-in, both flush every 5 ms, 1000/s",
    ),
    Headline(
        "peak network memory / its budget, shuffling 20× the budget",
        MEMORY,
        _memory,
        _percent,
        "Sluice's peak network memory / budget",
    ),
    Headline(
        "one connection's throughput / iperf3's, loopback, Sluice's defaults",
        TRANSPORT,
        _iperf3,
        _percent,
        "one connection / iperf3 (best series)",
        newer=(
            "the 26 November run (same command) moved as much through Sluice (12.7 Gbit/s of 10 KiB records at "
            "100 ms, as on 24 November) but measured iperf3 at 13.7 to 17.6 Gbit/s against 29 to 31: its higher "
            "ratio is iperf3's drop at a higher load; the deeper run set non-default credit options"
        ),
    ),
)


def load(root: Path, name: str) -> Dict[str, Any]:
    loaded: Dict[str, Any] = json.loads((root / RESULTS / name).read_text(encoding="utf-8"))
    return loaded


def _goal(result: Dict[str, Any], name: Optional[str], shown: Callable[[float], str]) -> str:
    if name is None:
        return "none set"
    for goal in result.get("goals", []):
        if goal["goal"] == name:
            sign = "≤" if goal["at_most"] else "≥"
            return f"{sign} {shown(float(goal['target']))}: {'met' if goal['met'] else 'missed'}"
    raise UnbackedClaim(f"goal {name!r} is not in {result.get('benchmark')} run of {result.get('started')}")


def _day(result: Dict[str, Any]) -> str:
    return str(result["started"])[:10]


def _rounds(result: Dict[str, Any]) -> int:
    return int(result["settings"]["rounds"])


def _load(result: Dict[str, Any]) -> Tuple[float, float]:
    m = result["machine"]
    return float(m["load_before"][0]), float(m["load_after"][0])


def _run_cell(result: Dict[str, Any], link: str) -> str:
    """The run as its JSON records it: date (linking the file), rounds, 1-minute load before and after."""
    rounds = _rounds(result)
    before, after = _load(result)
    what = f"{rounds} rounds" if rounds > 1 else "**1 round**"
    return f"[{_day(result)}]({link}), {what}, load {before:.1f} → {after:.1f}"


def _machine(result: Dict[str, Any]) -> str:
    m = result["machine"]
    java = str(m["java"]).split("/")[0].replace("openjdk version", "OpenJDK").replace('"', "").split(" 20")[0].strip()
    software = f"{java}, Spark {m['spark']}, Sluice {m['sluice']}"
    return f"{m['nproc']} cores ({m['cpu_model']}), {m['memory_gib']} GiB, {software}"


def check_claims(text: str, result: Dict[str, Any]) -> List[str]:
    """What ``text`` claims of ``result`` that its JSON does not record."""
    wrong: List[str] = []
    lowered = text.lower()
    before, _ = _load(result)
    if "quiet" in lowered and before >= QUIET_LOAD:
        wrong.append(f"'quiet', but the load before the run was {before:.1f} (quiet means below {QUIET_LOAD:g})")
    if "median" in lowered and _rounds(result) < 2:
        wrong.append("'median', but the run has one round")
    if re.search(r"\bhosts?\b", lowered):
        wrong.append("'host': a result records one machine; dev/cluster's workers are network namespaces on it")
    for phrase in UNBACKED_PHRASES:
        if phrase in lowered:
            wrong.append(f"{phrase!r}: no result file records that")
    return wrong


@dataclass(frozen=True)
class Newer:
    """A run of a headline's benchmark started after the headline's own run, with the value it gives."""

    path: Path
    result: Dict[str, Any]
    value: float


def _results(root: Path) -> Iterator[Tuple[Path, Dict[str, Any]]]:
    for directory in SEARCHED:
        for path in sorted((root / directory).glob("*.json")):
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                continue
            if isinstance(loaded, dict) and "benchmark" in loaded and "started" in loaded:
                yield path.relative_to(root), loaded


def newer_runs(root: Path, h: Headline) -> List[Newer]:
    """Every run of ``h``'s benchmark that started after ``h``'s run and holds a value for it, oldest first."""
    own = load(root, h.result)
    found = []
    for path, result in _results(root):
        if result["benchmark"] != own["benchmark"] or str(result["started"]) <= str(own["started"]):
            continue
        try:
            value = h.value(result)
        except (KeyError, TypeError, ValueError):
            continue  # the run did not measure this row (another setting, shape or job)
        found.append(Newer(path, result, value))
    return sorted(found, key=lambda n: str(n.result["started"]))


def _link(page: str, path: Path) -> str:
    return Path(os.path.relpath(path, Path(page).parent)).as_posix()


def headlines_block(root: Path, page: str) -> str:
    """The machine, the markdown table of every headline (each linking its JSON) and the newer runs
    not used; raises :class:`UnbackedClaim` on anything the JSON does not back."""
    results = {h.result: load(root, h.result) for h in HEADLINES}
    machines = sorted({_machine(r) for r in results.values()})
    lines = [
        (
            f"Every run on one machine: {machines[0]}."
            if len(machines) == 1
            else f"Each run on one machine, of {len(machines)} kinds: {'; '.join(machines)} (the table's "
            "ratios come from one run each; compare runs of one kind)."
        )
        + " In each run the contenders took turns, round "
        "by round; times and latencies are medians over the rounds, memory the peak of all of them, "
        "throughput the best buffer timeout's median. A run of one round is a single pair.",
        "",
        "| Sluice / Spark's own shuffle (lower is better for time) | value | goal (from the run) "
        "| run, rounds, load before → after |",
        "|---|---:|---|---|",
    ]
    problems: List[str] = []
    notes: List[str] = []
    for h in HEADLINES:
        result = results[h.result]
        problems += [f"{h.measure}: {w}" for w in check_claims(h.measure + " " + h.newer, result)]
        try:
            goal = _goal(result, h.goal, h.shown)
        except UnbackedClaim as e:
            problems.append(f"{h.measure}: {e}")
            continue
        link = _link(page, RESULTS / h.result)
        lines.append(f"| {h.measure} | **{h.shown(h.value(result))}** | {goal} | {_run_cell(result, link)} |")
        newer = newer_runs(root, h)
        if newer and not h.newer:
            problems.append(
                f"{h.measure}: newer runs of {result['benchmark']} hold this value "
                f"({', '.join(str(n.path) for n in newer)}): make the newest the row's run, "
                "or say why not (Headline.newer)"
            )
        elif h.newer and not newer:
            problems.append(f"{h.measure}: gives a reason for passing over newer runs, but there are none")
        elif newer:
            runs = "; ".join(f"{h.shown(n.value)} ({_run_cell(n.result, _link(page, n.path))})" for n in newer)
            notes.append(f"- {h.measure}: {runs}. Not the headline: {h.newer}.")
    if problems:
        raise UnbackedClaim("the JSON does not back:\n  " + "\n  ".join(problems))
    if notes and page == NEWER_LISTED_ON:
        lines += ["", "Newer runs of the same benchmarks, and why the table keeps its run:", "", *notes]
    elif notes:
        where = _link(page, Path(NEWER_LISTED_ON))
        lines += [
            "",
            f"{len(notes)} rows have newer runs that the table passes over; "
            f"[{NEWER_LISTED_ON}]({where}) lists them and why.",
        ]
    return "\n".join(lines)


def slower_cases(root: Path) -> List[Tuple[str, float, str]]:
    """(case, Sluice time / sort time, JSON file) of every measured case at least SLOWER_FROM, slowest first."""
    cases: List[Tuple[str, float, str]] = []
    for setting, label in SETTINGS.items():
        at = load(root, TPCH[setting])["summary"]["settings"][setting]
        for query, q in at["tpch_queries"].items():
            if q["ratio"] >= SLOWER_FROM:
                cases.append((f"TPC-H Q{query} alone, {label}", float(q["ratio"]), TPCH[setting]))
    cold = load(root, COLD)
    for job, j in cold["summary"]["settings"]["defaults"]["jobs"].items():
        if j["ratio"] >= SLOWER_FROM:
            what = _COLD_JOBS.get(job, f"TPC-H {job.upper()} at SF {cold['settings']['scale']:g}")
            cases.append((f"a fresh application's first jobs: {what}, Spark's defaults", float(j["ratio"]), COLD))
    cluster = load(root, CLUSTER)
    for rate, at in cluster["summary"]["rates"].items():
        for job, j in at["jobs"].items():
            if j["ratio"] >= SLOWER_FROM:
                speed = rate.replace("gbit", " Gbit/s")
                cases.append(
                    (f"the {_JOBS.get(job, job)} job on dev/cluster at {speed} links, one round", j["ratio"], CLUSTER)
                )
    return sorted(cases, key=lambda c: -c[1])


def slower_block(root: Path, page: str) -> str:
    lines = [
        f"- {case}: **{ratio:.2f}** of the sort shuffle's time ([run]({_link(page, RESULTS / name)}))"
        for case, ratio, name in slower_cases(root)
    ]
    return "\n".join(lines)


_BLOCKS: Dict[str, Callable[[Path, str], str]] = {"headlines": headlines_block, "slower": slower_block}


def render(root: Path, page: str) -> str:
    """``page``'s text with every generated block rewritten from the JSON; raises :class:`UnbackedClaim`
    when the page or a block says what no result file backs."""
    text = (root / page).read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), 1):
        for phrase in UNBACKED_PHRASES:
            if phrase in line.lower():
                raise UnbackedClaim(f"{page}:{number} says {phrase!r}, which no result file records")
    for name, block in _BLOCKS.items():
        pattern = re.compile(rf"(<!-- {name}:begin[^>]*-->\n)(?:.*?\n)?(<!-- {name}:end -->)", re.DOTALL)
        match = pattern.search(text)
        if match is None:
            raise ValueError(f"{page} has no <!-- {name}:begin --> ... <!-- {name}:end --> block")
        body = block(root, page)
        text = text[: match.start()] + match.group(1) + body + "\n" + match.group(2) + text[match.end() :]
    return text


def stale_pages(root: Path) -> List[str]:
    """The pages whose generated blocks differ from what the JSON says."""
    return [page for page in PAGES if render(root, page) != (root / page).read_text(encoding="utf-8")]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice_bench.headlines", description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=".", help="the repository root (default: the current directory)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a page's generated block is stale")
    parsed = parser.parse_args(argv)
    root = Path(parsed.root)
    try:
        if parsed.check:
            stale = stale_pages(root)
            if stale:
                print(
                    f"stale headline numbers in {', '.join(stale)}: run python -m sluice_bench.headlines",
                    file=sys.stderr,
                )
                return 1
            return 0
        rendered = {page: render(root, page) for page in PAGES}
    except UnbackedClaim as e:
        print(f"python -m sluice_bench.headlines: {e}", file=sys.stderr)
        return 1
    for page, text in rendered.items():
        (root / page).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
