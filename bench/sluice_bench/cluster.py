"""``sluice bench cluster``: the batch benchmark on a real, if small, cluster: dev/cluster's Spark
standalone cluster, whose Master, Workers and driver each run in a network host of their own (a
network namespace) joined through a bridge by links rate-limited with ``tc ... tbf``, once per
link rate (``--rates``, default 1 Gbit/s and 10 Gbit/s). At each rate, Sluice and Spark's sort
shuffle take turns (A B A B ...), one application per run, its driver in the driver host; each
runs the heavy job and TPC-H of ``sluice bench batch`` and a wide shuffle of ``sluice bench
scale``, timed per job, and Sluice's answers are checked against the sort shuffle's of the same
round. ``--jobs sha2`` runs ``sluice bench batch --job sha2``'s CPU-bound job in the heavy job's
place (into ``cluster-sha2.json``).

While an application runs, every worker host's link byte counters (its ``eth0``'s, read from
``/proc/PID/net/dev`` of a process in the host: the counters of that process's network
namespace) are sampled every 0.1 s. Each job's reduce stage is its stage that read the most
shuffle bytes from other executors, its window the stage's submission and completion times in
Spark's REST API. Per link, the rate achieved *while the reduce stage reads* is the bytes the
host received in the sampling intervals of that window in which its link carried at least 5 %
of the configured rate, over the length of those intervals; the stage's mean rate (all bytes
over the whole window) and the best one-second rate are reported beside it.

Needs root (network namespaces) and a Sluice checkout: the cluster is its dev/cluster (``--checkout``).
Goals, at each rate: Sluice at most 0.90 of the sort shuffle's time (all jobs), and Sluice's
shuffle traffic at least 0.90 of the link rate while the
heavy job's reduce stage reads.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, Dict, List, Optional, Sequence, Tuple

from sluice_bench import batch, charts, scale, tpch
from sluice_bench.apps import LOG_DIR, run_app, run_plan
from sluice_bench.compare import difference
from sluice_bench.errors import BenchError
from sluice_bench.results import Recorder, command_line, save_result, subtitle_of
from sluice_bench.stats import alternation, goal, median, ratio, spread

CONTENDERS = ("sluice", "sort")
JOBS = ("heavy", "sha2", "tpch", "wide")
# The jobs that run in the applications' shuffle-job slot (``sluice bench batch``'s ``--job``):
# one of them at a time, its results under the run's "heavy" key.
SHUFFLE_JOBS = ("heavy", "sha2")
WIDE = (400, 200)  # maps x reducers of the wide shuffle
QUICK_WIDE = (40, 20)
SAMPLE_SECONDS = 0.1  # how often the links' byte counters are read
BUSY_FRACTION = 0.05  # an interval counts as reading when its link carried this much of the rate
PEAK_SECONDS = 1.0  # the span of the best rate reported
TIME_GOAL = 0.90
LINK_GOAL = 0.90
APP_TIMEOUT = 2 * 3600


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", dest="rounds", type=int, help="the same as --rounds")
    parser.add_argument(
        "--rates", default="1gbit,10gbit", help="link rates, in tc's spelling, one cluster each (default %(default)s)"
    )
    parser.add_argument(
        "--jobs",
        default="heavy,tpch,wide",
        help=f"which jobs each application runs, of {', '.join(JOBS)} (default %(default)s; sha2 replaces heavy)",
    )
    parser.add_argument("--scale", type=float, help="TPC-H scale factor (default 1; quick 0.01)")
    parser.add_argument("--queries", help="TPC-H queries to run, e.g. 1,3,6 (default all 22)")
    parser.add_argument(
        "--heavy-rows",
        type=int,
        help=f"rows of the heavy job (default {batch.HEAVY_ROWS:,}; quick {batch.QUICK_HEAVY_ROWS:,})",
    )
    parser.add_argument(
        "--wide",
        help=f"maps x reducers of the wide shuffle (default {WIDE[0]}x{WIDE[1]}; "
        f"quick {QUICK_WIDE[0]}x{QUICK_WIDE[1]})",
    )
    parser.add_argument("--workers", type=int, default=2, help="worker hosts (default %(default)s)")
    parser.add_argument("--cores", type=int, default=1, help="cores per worker (default %(default)s)")
    parser.add_argument(
        "--memory", default="3g", help="memory per worker, all of it its executor's (default %(default)s)"
    )
    parser.add_argument(
        "--checkout", help="the Sluice checkout whose dev/cluster to use (default: $SLUICE_ROOT, else .)"
    )


# --- the cluster ----------------------------------------------------------------------------


def dev_cluster(checkout: Optional[str] = None) -> ModuleType:
    """dev/cluster's tool, the module ``sluice_cluster.netcluster`` of a Sluice checkout's ``dev/``."""
    roots = [Path(checkout)] if checkout else [Path(r) for r in (os.environ.get("SLUICE_ROOT"), ".") if r]
    found = next((r for r in roots if (r / "dev" / "sluice_cluster" / "netcluster.py").is_file()), None)
    if found is None:
        raise BenchError(
            "needs dev/cluster from a Sluice checkout: run it from the checkout's root or pass --checkout PATH "
            f"(looked in {', '.join(str(r) for r in roots)})"
        )
    dev = str(found.resolve() / "dev")
    if dev not in sys.path:
        sys.path.insert(0, dev)
    return importlib.import_module("sluice_cluster.netcluster")


def host_pid(dev: ModuleType, host: Any) -> int:
    """A process that lives in ``host`` as long as the cluster does: its Spark Worker (or Master)."""
    for pid in dev.namespace_pids(host.ns):
        if "org.apache.spark.deploy." in dev.cmdline(pid):
            return int(pid)
    raise BenchError(f"no Spark daemon runs in host {host.name} ({host.ns})")


def read_counters(pid: int, device: str = "eth0") -> Tuple[int, int]:
    """The received and transmitted bytes of ``device`` in the network namespace of process ``pid``."""
    with open(f"/proc/{pid}/net/dev") as f:
        for line in f:
            name, _, fields = line.partition(":")
            if name.strip() == device:
                values = fields.split()
                return int(values[0]), int(values[8])
    raise BenchError(f"process {pid}'s network namespace has no device {device}")


class LinkSampler:
    """Reads each host's link byte counters every ``interval`` seconds in a thread while it is
    entered: ``times`` (seconds since the epoch, as Spark's REST API times) and per host ``rx``
    and ``tx`` (cumulative bytes)."""

    def __init__(self, pids: Dict[str, int], interval: float = SAMPLE_SECONDS) -> None:
        self.pids = pids
        self.interval = interval
        self.times: List[float] = []
        self.rx: Dict[str, List[int]] = {h: [] for h in pids}
        self.tx: Dict[str, List[int]] = {h: [] for h in pids}
        self.error: Optional[str] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="link-sampler", daemon=True)

    def __enter__(self) -> "LinkSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        try:
            while True:
                self.sample()
                if self._stop.wait(self.interval):
                    break
            self.sample()
        except (OSError, BenchError) as e:
            self.error = f"the link counters could not be read: {e}"

    def sample(self) -> None:
        read = {h: read_counters(pid) for h, pid in self.pids.items()}
        self.times.append(time.time())
        for h, (rx, tx) in read.items():
            self.rx[h].append(rx)
            self.tx[h].append(tx)


# --- link rates -------------------------------------------------------------------------------


def counter_at(times: Sequence[float], values: Sequence[float], t: float) -> float:
    """A cumulative counter's value at time ``t``, linear between samples, flat outside them."""
    if not times:
        return float("nan")
    if t <= times[0]:
        return float(values[0])
    if t >= times[-1]:
        return float(values[-1])
    lo, hi = 0, len(times) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if times[mid] <= t:
            lo = mid
        else:
            hi = mid
    span = times[hi] - times[lo]
    share = (t - times[lo]) / span if span > 0 else 1.0
    return float(values[lo]) + (float(values[hi]) - float(values[lo])) * share


def window_traffic(
    times: Sequence[float],
    values: Sequence[float],
    start: float,
    end: float,
    link_bps: float,
    busy_fraction: float = BUSY_FRACTION,
    peak_seconds: float = PEAK_SECONDS,
) -> Dict[str, float]:
    """One cumulative byte counter between ``start`` and ``end``: all its bytes and the window's
    seconds; the bytes and seconds of the sampling intervals (cut at the window's edges) that ran
    at ``busy_fraction`` of ``link_bps`` or more, when the link was in use; and the best rate
    (bytes per second) over any ``peak_seconds`` (or the whole window, when shorter)."""
    points = [start] + [t for t in times if start < t < end] + [end]
    counts = [counter_at(times, values, t) for t in points]
    busy_bytes = busy_seconds = 0.0
    for i in range(len(points) - 1):
        seconds, moved = points[i + 1] - points[i], counts[i + 1] - counts[i]
        if seconds > 0 and moved * 8 / seconds >= busy_fraction * link_bps:
            busy_bytes += moved
            busy_seconds += seconds
    span = min(peak_seconds, end - start)
    peak, j = 0.0, 0
    for i in range(len(points)):
        j = max(j, i + 1)
        while j < len(points) and points[j] - points[i] < span - 1e-9:
            j += 1
        if j < len(points) and points[j] > points[i]:
            peak = max(peak, (counts[j] - counts[i]) / (points[j] - points[i]))
    return {
        "bytes": counts[-1] - counts[0],
        "seconds": end - start,
        "busy_bytes": busy_bytes,
        "busy_seconds": busy_seconds,
        "peak_bytes_per_s": peak,
    }


def link_rates(windows: Sequence[Dict[str, float]], link_bps: float) -> Dict[str, float]:
    """Several windows' :func:`window_traffic` of one link, added up, as rates: ``read_bps`` (while
    the link was in use), ``mean_bps`` (over the whole windows), ``peak_bps``, and ``read_bps``
    as a fraction of ``link_bps``."""
    total = {key: sum(w[key] for w in windows) for key in ("bytes", "seconds", "busy_bytes", "busy_seconds")}
    read_bps = ratio(total["busy_bytes"] * 8, total["busy_seconds"])
    return {
        "read_bps": read_bps,
        "read_fraction": ratio(read_bps, link_bps),
        "mean_bps": ratio(total["bytes"] * 8, total["seconds"]),
        "peak_bps": max((w["peak_bytes_per_s"] * 8 for w in windows), default=float("nan")),
        "bytes": total["bytes"],
        "busy_seconds": total["busy_seconds"],
        "stage_seconds": total["seconds"],
    }


def reduce_stage(stages: Sequence[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The stage that read the most shuffle bytes from other executors (None when none did)."""
    reading = [s for s in stages if int(s.get("remote_bytes_read", 0)) > 0]
    return max(reading, key=lambda s: int(s["remote_bytes_read"])) if reading else None


def job_stages(run: Dict[str, Any], job: str) -> List[Dict[str, Any]]:
    """The reduce stages of one job of a run (TPC-H: one per query that read remote bytes)."""
    key = run_key(job)
    timed = list(run.get("tpch", {}).values()) if job == "tpch" else [run[key]] if key in run else []
    return [s for s in (reduce_stage(t.get("stages", [])) for t in timed) if s is not None]


def link_report(run: Dict[str, Any], sampler: LinkSampler, link_bps: float, jobs: Sequence[str]) -> Dict[str, Any]:
    """Per job: each worker link's received and transmitted rates during the job's reduce stages,
    and ``read_bps``/``read_fraction``, the mean over the links of the received rate while in use."""
    report: Dict[str, Any] = {}
    for job in jobs:
        stages = job_stages(run, job)
        if not stages or len(sampler.times) < 2:
            continue
        links: Dict[str, Any] = {}
        for host in sampler.pids:
            links[host] = {
                direction: link_rates(
                    [
                        window_traffic(sampler.times, series[host], s["submitted"], s["completed"], link_bps)
                        for s in stages
                    ],
                    link_bps,
                )
                for direction, series in (("rx", sampler.rx), ("tx", sampler.tx))
            }
        read = [v["rx"]["read_bps"] for v in links.values() if v["rx"]["read_bps"] == v["rx"]["read_bps"]]
        report[job] = {
            "reduce_stages": [s["stage"] for s in stages],
            "remote_bytes_read": sum(int(s["remote_bytes_read"]) for s in stages),
            "links": links,
            "read_bps": sum(read) / len(read) if read else float("nan"),
            "read_fraction": ratio(sum(read) / len(read), link_bps) if read else float("nan"),
        }
    return report


def rate_series(run: Dict[str, Any], sampler: LinkSampler, job: str) -> Optional[Dict[str, Any]]:
    """The worker links' received rate (Gbit/s) per sampling interval while ``job`` ran, times in
    seconds from the start of its reduce stage, and that stage's window: the chart's right side."""
    stages = (run.get(run_key(job)) or {}).get("stages", [])
    stage = reduce_stage(stages)
    if stage is None or len(sampler.times) < 2:
        return None
    first, last = min(s["submitted"] for s in stages), max(s["completed"] for s in stages)
    keep = [i for i, t in enumerate(sampler.times) if first - 1.0 <= t <= last + 1.0]
    if len(keep) < 2:
        return None
    times = sampler.times
    out: Dict[str, Any] = {
        "job": job,
        "t": [round((times[i] + times[i - 1]) / 2 - stage["submitted"], 3) for i in keep[1:]],
        "reduce_stage": [0.0, round(stage["completed"] - stage["submitted"], 3)],
        "gbps": {},
    }
    for host, series in sampler.rx.items():
        out["gbps"][host] = [
            round((series[i] - series[i - 1]) * 8 / (times[i] - times[i - 1]) / 1e9, 4) for i in keep[1:]
        ]
    return out


# --- the benchmark --------------------------------------------------------------------------


def parse_shape(text: str) -> Tuple[int, int]:
    maps, _, reduces = text.lower().partition("x")
    if not (maps.strip().isdigit() and reduces.strip().isdigit()) or int(maps) < 1 or int(reduces) < 1:
        raise BenchError(f"--wide takes MAPSxREDUCERS, e.g. 400x200, not {text!r}")
    return int(maps), int(reduces)


def spec_for(args: argparse.Namespace, jobs: Sequence[str]) -> Dict[str, Any]:
    """The applications' spec: ``sluice bench batch``'s (heavy job, TPC-H), a wide shuffle, and
    executors as large as the workers; the master is each rate's cluster's."""
    base = argparse.Namespace(
        quick=args.quick,
        heavy_rows=args.heavy_rows,
        scale=args.scale,
        queries=args.queries,
        no_heavy=not [j for j in jobs if j in SHUFFLE_JOBS],
        job="sha2" if "sha2" in jobs else "heavy",
        no_tpch="tpch" not in jobs,
        memory="0",
        option=args.option,
    )
    spec = batch.spec_for(base)
    spec["master"] = None
    spec["conf"].update({"spark.executor.memory": args.memory, "spark.executor.cores": str(args.cores)})
    maps, reduces = parse_shape(args.wide) if args.wide else QUICK_WIDE if args.quick else WIDE
    rows = max(scale.QUICK_BASE_ROWS if args.quick else scale.BASE_ROWS, 5 * maps * reduces)
    spec["wide"] = {"rows": rows, "maps": maps, "reduces": reduces} if "wide" in jobs else None
    return spec


def _interrupt(signum: int, frame: Optional[FrameType]) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(args: argparse.Namespace, argv: Optional[List[str]] = None) -> int:
    jobs = [j.strip() for j in str(args.jobs).split(",") if j.strip()]
    if not jobs or [j for j in jobs if j not in JOBS]:
        raise BenchError(f"--jobs takes some of {', '.join(JOBS)}, not {args.jobs!r}")
    if len([j for j in jobs if j in SHUFFLE_JOBS]) > 1:
        raise BenchError(
            f"--jobs takes one of {' and '.join(SHUFFLE_JOBS)} (they run in the same place), not {args.jobs!r}"
        )
    if os.geteuid() != 0:
        raise BenchError("needs root: the cluster's hosts are network namespaces (CAP_NET_ADMIN, CAP_SYS_ADMIN)")
    rates = [r.strip() for r in str(args.rates).split(",") if r.strip()]
    dev = dev_cluster(args.checkout)
    try:
        bits = {rate: float(dev.rate_bits(rate)) for rate in rates}
    except dev.ClusterError as e:
        raise BenchError(str(e).replace("--rate", "--rates")) from None
    if not rates:
        raise BenchError("--rates names no rate")
    rounds = args.rounds or (1 if args.quick else 3)
    spec = spec_for(args, jobs)
    if spec["tpch"] is not None:
        tpch.ensure_data(Path(spec["tpch"]["data_dir"]), float(spec["scale"]))
    settings = {
        "rounds": rounds,
        "quick": bool(args.quick),
        "rates": rates,
        "jobs": jobs,
        "workers": args.workers,
        "cores_per_worker": args.cores,
        "memory_per_worker": args.memory,
        "sample_seconds": SAMPLE_SECONDS,
        "busy_fraction": BUSY_FRACTION,
        "spec": spec,
    }
    recorder = Recorder("cluster", command_line(argv), settings)
    results: Dict[str, Dict[str, List[Dict[str, Any]]]] = {}
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        for rate in rates:
            results[rate] = run_rate(dev, rate, bits[rate], args, spec, rounds, jobs, recorder)
    except dev.ClusterError as e:
        raise BenchError(f"the cluster: {e}") from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for rate in rates:
        check_answers(rate, results[rate], recorder)
    summarize(results, bits, jobs, recorder)
    path, chart = save_result(recorder, args.out, "cluster-sha2" if "sha2" in jobs else "cluster", draw)
    print_summary(recorder, path, chart)
    if recorder.mismatches:
        print("\nANSWER MISMATCHES: Sluice's answers differ from the reference; the timings are void:")
        for m in recorder.mismatches:
            print("  " + m)
        return 1
    return 0


def run_rate(
    dev: ModuleType,
    rate: str,
    link_bps: float,
    args: argparse.Namespace,
    spec: Dict[str, Any],
    rounds: int,
    jobs: Sequence[str],
    recorder: Recorder,
) -> Dict[str, List[Dict[str, Any]]]:
    """Brings a cluster up with links of ``rate``, runs every round's applications on it with the
    drivers in its driver host while the worker links are sampled, and tears it down (also on a
    failure or Ctrl-C; its logs are kept then)."""
    runs: Dict[str, List[Dict[str, Any]]] = {c: [] for c in CONTENDERS}
    with dev.Cluster(workers=args.workers, rate=rate, cores=args.cores, memory=args.memory) as cluster:
        print(
            f"[bench cluster] {rate}: master {cluster.master_url}, workers "
            f"{', '.join(h.address for h in cluster.worker_hosts)}, namespaces {cluster.prefix}*",
            file=sys.stderr,
        )
        pids = {h.name: host_pid(dev, h) for h in cluster.worker_hosts}
        here = dict(spec, master=cluster.master_url)
        launcher = ["ip", "netns", "exec", cluster.driver.ns]
        env = cluster.host_env(cluster.driver)

        def one(item: Tuple[int, str]) -> None:
            round_number, contender = item
            with LinkSampler(pids) as sampler:
                result = run_app(
                    "cluster", contender, here, timeout=APP_TIMEOUT, log_dir=LOG_DIR, launcher=launcher, env=env
                )
            if sampler.error:
                raise BenchError(sampler.error)
            result.update(round=round_number, rate=rate, samples=len(sampler.times))
            result["links"] = link_report(result, sampler, link_bps, jobs)
            series_job = next((j for j in (*SHUFFLE_JOBS, "wide") if j in jobs), None)
            result["series"] = rate_series(result, sampler, series_job) if series_job else None
            runs[contender].append(result)
            recorder.runs.append(batch._without_answers(result))

        run_plan(alternation(CONTENDERS, rounds), f"bench cluster {rate}", lambda i: f"round {i[0]}: {i[1]}", one)
    return runs


def check_answers(rate: str, runs: Dict[str, List[Dict[str, Any]]], recorder: Recorder) -> None:
    """Every Sluice answer against the sort shuffle's of the same rate and round."""
    before = len(recorder.mismatches)
    checked = int(recorder.summary.get("answers_checked", 0))
    batch.check_answers(runs, recorder)
    checked += int(recorder.summary["answers_checked"])
    for sluice_run, sort_run in zip(runs["sluice"], runs["sort"]):
        if "wide" in sluice_run:
            checked += 1
            diff = difference(sort_run["wide"]["answer"], sluice_run["wide"]["answer"])
            if diff:
                recorder.mismatches.append(f"round {sluice_run['round']}, wide shuffle: {diff}")
    recorder.mismatches[before:] = [f"{rate}: {m}" for m in recorder.mismatches[before:]]
    recorder.summary["answers_checked"] = checked


def job_seconds(run: Dict[str, Any], job: str) -> float:
    if job == "tpch":
        return float(sum(q["seconds"] for q in run["tpch"].values()))
    return float(run[run_key(job)]["seconds"])


def run_key(job: str) -> str:
    """Where a run's result holds ``job``: the shuffle jobs share the "heavy" key."""
    return "heavy" if job in SHUFFLE_JOBS else job


def summarize(
    results: Dict[str, Dict[str, List[Dict[str, Any]]]], bits: Dict[str, float], jobs: Sequence[str], recorder: Recorder
) -> None:
    per_rate: Dict[str, Any] = {}
    link_job = next((j for j in SHUFFLE_JOBS if j in jobs), jobs[0])
    for rate, runs in results.items():
        entry: Dict[str, Any] = {"configured_bps": bits[rate], "jobs": {}}
        for job in jobs:
            times = {c: spread([job_seconds(r, job) for r in runs[c]]) for c in CONTENDERS}
            links: Dict[str, Any] = {}
            for c in CONTENDERS:
                reports = [r["links"][job] for r in runs[c] if job in r["links"]]
                if reports:
                    links[c] = {
                        "read_bps": median([x["read_bps"] for x in reports]),
                        "read_fraction": median([x["read_fraction"] for x in reports]),
                        "mean_bps": median(
                            [sum(v["rx"]["mean_bps"] for v in x["links"].values()) / len(x["links"]) for x in reports]
                        ),
                        "peak_bps": median([max(v["rx"]["peak_bps"] for v in x["links"].values()) for x in reports]),
                        "busy_seconds": median(
                            [max(v["rx"]["busy_seconds"] for v in x["links"].values()) for x in reports]
                        ),
                        "stage_seconds": median(
                            [max(v["rx"]["stage_seconds"] for v in x["links"].values()) for x in reports]
                        ),
                        "remote_bytes_read": median([x["remote_bytes_read"] for x in reports]),
                    }
            entry["jobs"][job] = {
                **times,
                "ratio": ratio(times["sluice"].get("median", float("nan")), times["sort"].get("median", float("nan"))),
                "links": links,
            }
        totals = {c: spread([sum(job_seconds(r, j) for j in jobs) for r in runs[c]]) for c in CONTENDERS}
        entry["total"] = totals
        entry["total_ratio"] = ratio(totals["sluice"]["median"], totals["sort"]["median"])
        per_rate[rate] = entry
        recorder.goals.append(
            goal(f"{rate}: all jobs, Sluice time / sort time", entry["total_ratio"], TIME_GOAL, at_most=True)
        )
        fraction = entry["jobs"][link_job]["links"].get("sluice", {}).get("read_fraction", float("nan"))
        recorder.goals.append(
            goal(
                f"{rate}: Sluice's link rate while the {link_job} job's reduce stage reads / {rate}",
                fraction,
                LINK_GOAL,
                at_most=False,
            )
        )
    recorder.summary["rates"] = per_rate
    recorder.summary["link_job"] = link_job


def draw(path: Path, result: Dict[str, Any]) -> Path:
    """The chart of a result (also from a saved JSON: ``sluice bench cluster --replot``)."""
    s = result["summary"]
    ratios: Dict[str, Dict[str, Optional[float]]] = {}
    fractions: Dict[str, Dict[str, Optional[float]]] = {}
    for rate, entry in s["rates"].items():
        ratios[rate] = {job: v["ratio"] for job, v in entry["jobs"].items()}
        ratios[rate]["all"] = entry["total_ratio"]
        links = entry["jobs"].get(s["link_job"], {}).get("links", {})
        fractions[rate] = {c: v["read_fraction"] for c, v in links.items()}
    # The link rate over time: each rate's last round, per contender (its first worker link).
    series: Dict[str, Dict[str, Any]] = {}
    for run in result["runs"]:
        if run.get("series"):
            series.setdefault(run["rate"], {})[run["contender"]] = run["series"]
    configured = {rate: entry["configured_bps"] for rate, entry in s["rates"].items()}
    return charts.cluster_chart(path, ratios, fractions, series, configured, s["link_job"], subtitle_of(result))


def print_summary(recorder: Recorder, path: Path, chart: Path) -> None:
    s = recorder.summary
    print(f"\n{'rate':<8}{'job':<7}{'sluice s':>10}{'sort s':>9}{'ratio':>7}{'sluice link':>14}{'sort link':>12}")
    for rate, entry in s["rates"].items():
        for job, v in entry["jobs"].items():
            link = {c: f"{v['links'][c]['read_bps'] / 1e9:.2f} Gbit/s" if c in v["links"] else "-" for c in CONTENDERS}
            print(
                f"{rate:<8}{job:<7}{v['sluice'].get('median', float('nan')):>10.2f}"
                f"{v['sort'].get('median', float('nan')):>9.2f}{v['ratio']:>7.2f}{link['sluice']:>14}{link['sort']:>12}"
            )
        t = entry["total"]
        print(
            f"{rate:<8}{'all':<7}{t['sluice']['median']:>10.2f}{t['sort']['median']:>9.2f}{entry['total_ratio']:>7.2f}"
        )
    for g in recorder.goals:
        sign = "<=" if g["at_most"] else ">="
        print(f"goal {g['goal']} {sign} {g['target']}: {g['value']:.2f} -> {'met' if g['met'] else 'MISSED'}")
    print(f"answers checked: {s.get('answers_checked', 0)}")
    print(f"result: {path}\nchart: {chart}")
