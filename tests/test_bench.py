"""sluice-bench's pure parts, without Spark: statistics, the alternation of contenders, answer
comparison, histograms, connection counting, result JSON shape, the CLI's wiring (``sluice-bench``
and ``sluice bench``), the cluster benchmark's link rates from byte counters, the benchmark jar, and
modules free of import cycles. (The benchmarks
themselves take minutes; `sluice bench NAME --quick` is their smoke run.)"""

from __future__ import annotations

import argparse
import ast
import datetime
import decimal
import gc
import json
import math
import os
import socket
import subprocess
import sys
import threading
import types
import weakref
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Set

import pytest
import sluice
import sluice_bench
from sluice_bench import (
    allocation,
    batch,
    cluster,
    connections,
    jobs,
    jobs_allocation,
    latency,
    scale,
    service,
    session,
    short,
    simulated,
    tpch,
    transport,
)
from sluice_bench._jars import bench_jar_path
from sluice_bench.args import parse_size
from sluice_bench.compare import difference, plain, plain_rows
from sluice_bench.errors import BenchError
from sluice_bench.histogram import Histogram, from_buckets, merge_files
from sluice_bench.results import Recorder, clean_floats
from sluice_bench.stats import alternation, goal, median, percentile, ratio


def test_median_ratio_and_percentile() -> None:
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 2, 3]) == 2.5
    assert math.isnan(median([]))
    assert ratio(1, 4) == 0.25
    assert math.isnan(ratio(1, 0)) and math.isnan(ratio(1, float("nan")))
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == 3.0
    assert percentile([0.0, 10.0], 0.99) == pytest.approx(9.9)


def test_alternation_balances_who_comes_first_and_who_follows_whom() -> None:
    assert alternation(["sluice", "sort"], 3) == [
        (1, "sluice"),
        (1, "sort"),
        (2, "sort"),
        (2, "sluice"),
        (3, "sluice"),
        (3, "sort"),
    ]
    # Three contenders: the second round mirrors the first, so c does not always follow b.
    plan = alternation(["a", "b", "c"], 3)
    assert [c for _, c in plan] == ["a", "b", "c", "c", "b", "a", "b", "c", "a"]
    assert [r for r, _ in plan] == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    # Within rounds, each contender follows each other one equally often (a Williams design), and
    # each comes first equally often: over 2n rounds for an odd n, over n for an even one.
    for contenders, rounds, times in ((["a", "b", "c"], 6, 2), (["a", "b", "c", "d"], 4, 1), (list("abcde"), 10, 2)):
        plan = alternation(contenders, rounds)
        orders = [[c for r, c in plan if r == k] for k in range(1, rounds + 1)]
        assert all(sorted(o) == sorted(contenders) for o in orders)
        follows = Counter((o[i], o[i + 1]) for o in orders for i in range(len(o) - 1))
        assert set(follows.values()) == {times} and len(follows) == len(contenders) * (len(contenders) - 1), follows
        assert Counter(o[0] for o in orders) == {c: rounds // len(contenders) for c in contenders}
    with pytest.raises(ValueError):
        alternation(["a"], 0)


def test_goal_and_sizes() -> None:
    assert goal("g", 0.7, 0.8, at_most=True)["met"]
    assert not goal("g", 0.9, 0.8, at_most=True)["met"]
    assert goal("g", 0.95, 0.9, at_most=False)["met"]
    assert not goal("g", float("nan"), 0.9, at_most=False)["met"]
    assert parse_size("32m") == 32 << 20 and parse_size("1g") == 1 << 30 and parse_size("512") == 512


def test_answers_compare_as_multisets_with_a_float_tolerance() -> None:
    expected = plain_rows([[decimal.Decimal("1.10"), "a", datetime.date(1995, 3, 15)], [2, "b", None]])
    assert expected[0] == [1.1, "a", "1995-03-15"]
    same_other_order = [[2, "b", None], [1.1 + 1e-12, "a", "1995-03-15"]]
    assert difference(expected, same_other_order) is None
    assert difference(expected, expected[:1]) == "1 rows instead of 2"
    off = [[1.2, "a", "1995-03-15"], [2, "b", None]]
    message = difference(expected, off)
    assert message is not None and "differs" in message
    assert plain(b"\x01\x02") == "0102" and plain([decimal.Decimal("3")]) == [3.0]


def test_batch_reports_every_mismatch() -> None:
    def app(contender: str, q1: List[List[Any]]) -> Dict[str, Any]:
        return {
            "contender": contender,
            "round": 1,
            "heavy": {"answer": [[1, 2]], "seconds": 1.0},
            "tpch": {"1": {"answer": q1, "seconds": 1.0}, "6": {"answer": [[5.0]], "seconds": 1.0}},
        }

    recorder = Recorder("batch", "sluice bench batch", {"rounds": 1})
    batch.check_answers({"sluice": [app("sluice", [[1.0]])], "sort": [app("sort", [[2.0]])]}, recorder)
    assert len(recorder.mismatches) == 1 and "Q1" in recorder.mismatches[0]
    assert recorder.summary["answers_checked"] == 3
    clean = Recorder("batch", "sluice bench batch", {"rounds": 1})
    batch.check_answers({"sluice": [app("sluice", [[1.0]])], "sort": [app("sort", [[1.0]])]}, clean)
    assert clean.mismatches == []


def test_batch_summary_cpu_per_gb_and_result_json_shape(tmp_path: Path) -> None:
    """Each setting is summarized on its own; CPU per GB divides each contender's median executor
    CPU by the sort shuffle's shuffle write bytes (one denominator for both)."""

    def runs(base_s: float, cpu: float, gb: float) -> Dict[str, List[Dict[str, Any]]]:
        return {
            c: [
                {
                    "contender": c,
                    "round": r,
                    "heavy": {
                        "seconds": t,
                        "shuffle_write_bytes": int(gb * 1e9) + (7 if c == "sluice" else 0),
                        "executor_process_cpu_s": t * cpu,
                        "executor_cpu_ns": int(t * 1e9),
                        "answer": [],
                    },
                    "tpch": {
                        "1": {
                            "seconds": t / 2,
                            "shuffle_write_bytes": int(gb * 1e9),
                            "executor_process_cpu_s": t,
                            "answer": [],
                        },
                        "2": {"seconds": t / 4, "shuffle_write_bytes": 0, "executor_process_cpu_s": 1.0, "answer": []},
                    },
                }
                for r, t in ((1, b), (2, b + 2))
            ]
            for c, b in (("sluice", base_s), ("sort", 10.0))
        }

    recorder = Recorder("batch", "sluice bench batch --rounds 2", {"rounds": 2})
    spec = {"heavy": {"rows": 1}, "tpch": {"queries": [1, 2]}}
    batch.summarize(
        {"off64": runs(6.0, 2.0, 2.0), "defaults": runs(12.0, 1.0, 0.5)}, recorder, {"off64": spec, "defaults": spec}
    )
    off, defaults = recorder.summary["settings"]["off64"], recorder.summary["settings"]["defaults"]
    assert off["label"] == "AQE off, 64 partitions" and "AQE on" in defaults["label"]
    assert off["heavy_ratio"] == pytest.approx(7 / 11)
    assert off["tpch_total"]["sluice"]["median"] == pytest.approx(7 * 0.75)
    heavy_cpu = off["heavy_cpu"]
    assert heavy_cpu["gb_shuffled"] == pytest.approx(2.0)  # the sort shuffle's bytes
    assert heavy_cpu["sluice"]["process_cpu_s"] == pytest.approx(14.0)  # median of 12 and 16
    assert heavy_cpu["sluice"]["process_cpu_s_per_gb"] == pytest.approx(7.0)
    assert heavy_cpu["sort"]["process_cpu_s_per_gb"] == pytest.approx(11.0)
    assert heavy_cpu["ratio"] == pytest.approx(14 / 22)
    assert heavy_cpu["sluice"]["task_cpu_s"] == pytest.approx(7.0)
    # TPC-H: the per-round sums of the queries' CPU (Q2 shuffled nothing: it still counts).
    assert off["tpch_cpu"]["sluice"]["process_cpu_s"] == pytest.approx(8.0)
    assert off["tpch_cpu"]["sort"]["process_cpu_s_per_gb"] == pytest.approx(12.0 / 2.0)
    assert off["tpch_queries"]["2"]["cpu"]["ratio"] == pytest.approx(1.0)
    assert math.isnan(off["tpch_queries"]["2"]["cpu"]["sort"]["process_cpu_s_per_gb"])
    assert defaults["heavy_ratio"] == pytest.approx(13 / 11)
    assert len(recorder.goals) == 8
    assert [g["met"] for g in recorder.goals] == [True] * 4 + [False] * 4
    assert all(g["goal"].startswith(("AQE off", "Spark's defaults")) for g in recorder.goals)
    result = clean_floats(recorder.result())
    for key in ("benchmark", "command", "machine", "settings", "summary", "goals", "mismatches", "runs"):
        assert key in result
    for key in ("nproc", "cpu_model", "memory_gib", "load_before", "load_after", "java", "spark", "sluice"):
        assert key in result["machine"]
    json.dumps(result, allow_nan=False)  # standard JSON: no NaN
    assert batch.draw(tmp_path / "batch.png", result).is_file()
    # A result saved before the settings existed still draws.
    old = dict(result, summary={k: v for k, v in off.items() if k != "label"})
    assert batch.draw(tmp_path / "old.png", old).is_file()
    assert batch.parse_settings("defaults, off64") == ["defaults", "off64"]
    with pytest.raises(batch.BenchError, match="--settings"):
        batch.parse_settings("aqe")


def test_short_queries_take_turns_job_by_job(tmp_path: Path) -> None:
    """Two applications running at once run the turn order's items one at a time, in order, each
    waiting for the item before it, whoever ran it; who goes first alternates by round."""
    from sluice_bench.jobs_short import Turns

    order = short.turn_order(["a", "b"], 2)
    assert order == [
        ["sluice", "a#1"], ["sort", "a#1"], ["sluice", "b#1"], ["sort", "b#1"],
        ["sort", "a#2"], ["sluice", "a#2"], ["sort", "b#2"], ["sluice", "b#2"],
    ]  # fmt: skip
    ran: List[str] = []
    lock = threading.Lock()
    running = [0]
    overlap = []

    def app(me: str) -> None:
        turns = Turns(str(tmp_path), order, me, timeout_s=30)
        turns.ready()

        def job(index: int, name: str) -> None:
            with lock:
                running[0] += 1
                overlap.append(running[0])
            # The sort app is slower per job: without turns it would fall behind.
            threading.Event().wait(0.05 if me == "sort" else 0.0)
            with lock:
                ran.append(f"{index}:{me}:{name}")
                running[0] -= 1

        turns.run(job)

    threads = [threading.Thread(target=app, args=(c,)) for c in ("sort", "sluice")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert ran == [f"{i}:{c}:{n}" for i, (c, n) in enumerate(order)]
    assert max(overlap) == 1
    lonely = Turns(str(tmp_path / "empty"), order, "sluice", timeout_s=0.05)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TimeoutError, match="ready-sort"):
        lonely.ready()


def test_short_summary_ratios_phases_goals_and_chart(tmp_path: Path) -> None:
    def runs(c: str, scale_s: float, answer: int) -> List[Dict[str, Any]]:
        return [
            {
                "job": job,
                "round": r,
                "seconds": base * scale_s + r,
                "outside_stages_s": 0.1 * r,
                "shuffle_fetch_wait_ms": 5 if c == "sluice" else 9,
                "answer": [[answer if job == "q6" and r == 2 else 1]],
            }
            for r in (1, 2, 3)
            for job, base in (("repartition_1k", 1.0), ("group_by_100k", 2.0), ("q1", 4.0), ("q6", 2.0))
        ]

    jobs_ = ["repartition_1k", "group_by_100k", "q1", "q6"]
    results = {"sluice": runs("sluice", 1.0, 7), "sort": runs("sort", 2.0, 1)}
    s = short.summarize(results, jobs_)
    assert s["jobs"]["q1"]["sluice_s"] == pytest.approx(6.0) and s["jobs"]["q1"]["sort_s"] == pytest.approx(10.0)
    assert s["jobs"]["q1"]["ratio"] == pytest.approx(0.6)
    assert s["jobs"]["q6"]["ratio"] == pytest.approx(4.0 / 6.0)
    assert s["jobs"]["q1"]["sluice_phases"]["outside_stages_s"] == pytest.approx(0.2)
    assert s["jobs"]["q1"]["sort_phases"]["shuffle_fetch_wait_ms"] == 9
    assert s["tpch_total"] == {"sluice": pytest.approx(10.0), "sort": pytest.approx(16.0)}
    assert s["shuffles_ratio"] == pytest.approx(7.0 / 10.0)
    assert s["slowest_query"] == {"job": "q6", "ratio": pytest.approx(4.0 / 6.0)}
    goals = short.goals_of(s, "AQE off")
    assert [g["met"] for g in goals] == [True, True] and "q6" in goals[0]["goal"]
    assert short.mismatches(results) == ["round 2, q6: " + difference([[1]], [[7]])]
    recorder = Recorder(short.NAME, "sluice bench batch --short", {"rounds": 3, "scale": 0.1})
    recorder.summary["settings"] = {"off64": dict(s, label="AQE off")}
    result = clean_floats(recorder.result())
    assert batch.draw(tmp_path / "short.png", result).is_file()
    # Saved after each setting: the settings run so far, their mismatches and goals.
    saved = Recorder(short.NAME, "sluice bench batch --short", {"rounds": 3, "scale": 0.1})
    labels = {"off64": {"label": "AQE off"}, "defaults": {"label": "defaults"}}
    path, _ = short.save(saved, {"off64": results}, labels, jobs_, str(tmp_path))
    written = json.loads(path.read_text())
    assert list(written["summary"]["settings"]) == ["off64"] and len(written["goals"]) == 2
    assert written["mismatches"] == ["off64: round 2, q6: " + difference([[1]], [[7]])]
    args = argparse.Namespace(short=True, no_tpch=False, queries=None, quick=True)
    assert batch.result_name(args) == "batch-short"
    assert batch.result_name(argparse.Namespace(short=True, cold=True)) == short.COLD_NAME
    cold, _ = short.save(saved, {"off64": results}, labels, jobs_, str(tmp_path), short.COLD_NAME)
    assert cold.name == "batch-short-cold.json" and json.loads(cold.read_text())["summary"]["settings"]["off64"]
    assert short.jobs_of(args) == ([1, 6], ["repartition_1k", "group_by_100k", "q1", "q6"])


def test_apps_run_together_and_a_failing_one_is_named(tmp_path: Path) -> None:
    from sluice_bench.apps import run_apps_together

    with pytest.raises(BenchError, match=r"nonsense/(a|b) failed \(exit 2\)"):
        run_apps_together("nonsense", {"a": {}, "b": {}}, timeout=120, log_dir=tmp_path)


PROC_STAT = "{pid} (java thread (x)) S 1 2 3 0 -1 4194560 100 0 0 0 {utime} {stime} 0 0 20 0 9 0 5 6 7"


def fake_proc(root: Path, pid: int, argv: List[str], utime: int, stime: int, threads: Dict[int, Any]) -> None:
    """A /proc/PID with its command line, stat and threads (TID -> (comm, utime, stime))."""
    d = root / str(pid)
    (d / "task").mkdir(parents=True)
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (d / "stat").write_text(PROC_STAT.format(pid=pid, utime=utime, stime=stime) + "\n")
    for tid, (comm, u, st) in threads.items():
        (d / "task" / str(tid)).mkdir()
        (d / "task" / str(tid) / "comm").write_text(comm + "\n")
        (d / "task" / str(tid) / "stat").write_text(PROC_STAT.format(pid=tid, utime=u, stime=st) + "\n")


def test_executor_cpu_comes_from_proc_less_the_benchmarks_sampler(tmp_path: Path) -> None:
    from sluice_bench import session

    driver = ["--driver-url", "spark://CoarseGrainedScheduler@h:7001"]
    backend = ["java", "-cp", "x", session.EXECUTOR_MAIN, *driver, "--executor-id", "0"]
    fake_proc(
        tmp_path, 10, backend + ["--app-id", "app-1"], 300, 100, {10: ("java", 1, 1), 11: ("sluice-bench-me", 30, 20)}
    )
    fake_proc(tmp_path, 11, backend + ["--app-id", "app-1"], 50, 50, {11: ("java", 1, 1)})
    fake_proc(tmp_path, 12, backend + ["--app-id", "app-2"], 999, 0, {})
    fake_proc(tmp_path, 13, ["python", "--app-id", "app-1"], 999, 0, {})
    # Another local-cluster application started in the same second: the same id, another driver.
    other = ["java", "-cp", "x", session.EXECUTOR_MAIN, "--driver-url", "spark://CoarseGrainedScheduler@h:7002"]
    fake_proc(tmp_path, 14, other + ["--app-id", "app-1"], 999, 0, {})
    (tmp_path / "self").mkdir()
    assert session.executor_pids("app-1", str(tmp_path)) == [10, 11, 14]
    assert session.executor_pids("app-1", str(tmp_path), driver_port="7002") == [14]
    assert session.executor_pids("app-1", str(tmp_path), driver_port="7001") == [10, 11]
    assert session.stat_cpu_ticks(PROC_STAT.format(pid=1, utime=7, stime=5)) == 12
    ticks = os.sysconf("SC_CLK_TCK")
    before = session.executor_cpu_seconds("app-1", str(tmp_path), driver_port="7001")
    assert before == {10: pytest.approx(350 / ticks), 11: pytest.approx(100 / ticks)}
    after = {10: before[10] + 2.0, 11: before[11] + 0.5}
    assert session.cpu_used(before, after) == pytest.approx(2.5)
    assert session.cpu_used(before, {10: 9.0}) is None  # an executor went away: unknown
    assert session.cpu_used({}, {}) is None


def test_executor_cpu_by_kind_of_thread(tmp_path: Path) -> None:
    """Each executor thread's CPU goes to its kind (tasks, JIT, Sluice's own threads, Spark's shuffle
    transport...); what threads that ended between two samples used is ``ended``."""
    from sluice_bench import session

    backend = ["java", session.EXECUTOR_MAIN, "--driver-url", "spark://x@h:7001", "--app-id", "app-1"]
    threads = {
        20: ("Executor task l", 500, 100),
        21: ("C2 CompilerThre", 80, 0),
        22: ("sluice-partitio", 30, 10),
        23: ("sluice-server-4", 20, 0),
        24: ("shuffle-client-", 5, 5),
        25: ("sluice-metrics-", 3, 1),
        26: ("Signal Dispatch", 1, 0),
    }
    fake_proc(tmp_path, 20, backend, 900, 100, threads)
    ticks = os.sysconf("SC_CLK_TCK")
    before = session.executor_thread_cpu("app-1", str(tmp_path), driver_port="7001")
    assert before["tasks"] == pytest.approx(600 / ticks) and before["total"] == pytest.approx(1000 / ticks)
    assert before["jit"] == pytest.approx(80 / ticks) and before["sluice reads"] == pytest.approx(40 / ticks)
    assert before["sluice network"] == pytest.approx(20 / ticks) and before["spark shuffle"] == pytest.approx(
        10 / ticks
    )
    assert before["sluice metrics"] == pytest.approx(4 / ticks) and before["other"] == pytest.approx(1 / ticks)
    after = dict(before, tasks=before["tasks"] + 2.0, total=before["total"] + 3.0)
    assert session.thread_cpu_used(before, after) == {"tasks": pytest.approx(2.0), "ended": pytest.approx(1.0)}


def test_histogram_quantiles_and_merging(tmp_path: Path) -> None:
    h = from_buckets([[0, 1, 50], [1000, 1016, 49], [10000, 10160, 1]])
    assert h.count == 100
    assert h.quantile_us(0.5) == 0.0
    assert 1000 <= h.quantile_us(0.99) < 1016
    assert 10000 <= h.quantile_us(1.0) < 10160
    assert math.isnan(Histogram().quantile_us(0.5))
    summary = h.summary()
    assert summary["count"] == 100 and summary["p99_ms"] == pytest.approx(1.0075, abs=0.01)
    for i, rows in enumerate(([[1000, 1016, 3]], [[1000, 1016, 2], [2000, 2032, 1]])):
        (tmp_path / f"latency-p{i}.json").write_text(json.dumps({"rows": 3, "histograms": {"e2e/2": rows}}))
    (tmp_path / "latency-broken.json").write_text("{not json")
    merged = merge_files(sorted(tmp_path.glob("latency-*.json")))
    assert merged["e2e/2"].count == 6


PROC_NET_TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:B0A7 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 100 1
   1: 0100007F:D431 0100007F:B0A7 01 00000000:00000000 00:00000000 00000000     0        0 200 1
   2: 0100007F:B0A7 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 201 1
   3: 0100007F:9C40 0100007F:AAAA 01 00000000:00000000 00:00000000 00000000     0        0 300 1
   4: 0100007F:9C41 0100007F:AAAA 06 00000000:00000000 00:00000000 00000000     0        0 301 1
"""


def test_the_watched_port_is_sluices_or_else_the_block_managers() -> None:
    """In an application of the sort shuffle the probe finds no Sluice port: the connection
    watcher then watches the block manager's, so both contenders' runs carry the same sampling."""
    assert jobs.shuffle_port({"sluice_port": 7337, "block_manager_port": 40000}) == 7337
    assert jobs.shuffle_port({"sluice_port": -1, "block_manager_port": 40000}) == 40000
    assert jobs.shuffle_port({}) == -1
    assert not jobs.ConnectionWatcher([{"executor_id": "0", "pid": 1, "sluice_port": -1}]).executors


def test_connections_between_sluice_ports_are_counted_per_direction() -> None:
    table = list(connections.parse_proc_net_tcp(PROC_NET_TCP))
    assert table[1] == (0xD431, 0xB0A7, "01", 200)
    ports = {"0": 0xB0A7, "1": 0xAAAA}
    inodes = {"0": {100, 201, 300, 301}, "1": {200}}
    # 1 -> 0: inode 200 (executor 1) to executor 0's port; 0 -> 1: inode 300 (301 is TIME_WAIT).
    assert connections.count_connections(table, inodes, ports) == {"0->1": 1, "1->0": 1}
    assert connections.sluice_connections({}, {}) == {}


def test_transport_parses_the_benchmarks_json_lines() -> None:
    output = "\n".join(
        [
            "WARN something",
            '{"kind":"run","mode":"remote","channels":1,"recordSize":100,"bufferTimeoutMs":1,"gbps":9.5}',
            '{"kind":"median","mode":"remote","channels":1,"recordSize":100,"bufferTimeoutMs":1,"gbps":9.5}',
        ]
    )
    runs = transport.parse_runs(output)
    assert len(runs) == 1 and runs[0]["gbps"] == 9.5
    command = transport.java_command(["--seconds", "1"])
    assert command[0] == "java" and "io.sluice.bench.TransportBenchmark" in command
    classpath = command[command.index("-cp") + 1].split(":")
    assert classpath[:2] == [bench_jar_path(), sluice.jar_path()]
    assert "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED" in command
    assert transport.option_arguments({"floating_buffers_per_gate": "32", "max_buffers_per_subpartition": 40}) == [
        "--spark.sluice.network.floatingBuffersPerGate",
        "32",
        "--spark.sluice.network.maxBuffersPerSubpartition",
        "40",
    ]
    with pytest.raises(transport.BenchError, match="floating_bufers_per_gate"):
        transport.option_arguments({"floating_bufers_per_gate": "32"})
    recorder = Recorder("transport", "sluice bench transport", {"rounds": 1})
    fake = [
        {
            "channels": 1,
            "recordSize": 100,
            "bufferTimeoutMs": t,
            "gbps": 10.0 if t else 4.0,
            "cpuMicrosPerBuffer": 30.0 if t else 50.0,
        }
        for t in transport.TIMEOUTS
    ]
    transport.summarize(recorder, [20.0], fake, [8.0])
    series = recorder.summary["series"]["Sluice, 1 ch, 100 B records"]
    assert series["fraction_of_100ms"]["1"] == 1.0 and series["fraction_of_100ms"]["0"] == 0.4
    assert series["cpu_us_per_buffer"]["100"] == 30.0 and series["cpu_us_per_buffer"]["0"] == 50.0
    assert recorder.summary["iperf3_cpu_us_per_32kib"] == 8.0
    assert [g["met"] for g in recorder.goals] == [True, False]


def test_pipelined_checksum_reaches_the_transport_and_latency_benchmarks() -> None:
    """``--pipelined-checksum`` sets Spark's spark.shuffle.streaming.checksum.enabled: for the JVM
    transport benchmark and, for both contenders, in the latency benchmark's applications."""
    assert transport.checksum_arguments(argparse.Namespace(pipelined_checksum="on")) == [
        "--spark.shuffle.streaming.checksum.enabled",
        "true",
    ]
    assert transport.checksum_arguments(argparse.Namespace(pipelined_checksum="off"))[1] == "false"
    args = argparse.Namespace(
        quick=True, rates=None, measure_seconds=None, memory="1024", source="scheduled", option=[]
    )
    for value, expected in (("on", "true"), ("off", "false")):
        args.pipelined_checksum = value
        assert latency.app_spec(args, 5, 5)["conf"]["spark.shuffle.streaming.checksum.enabled"] == expected


def test_latency_goals_compare_equal_intervals_only() -> None:
    def phase(rate: int, p99: float) -> Dict[str, Any]:
        stats = {"p50_ms": p99 / 2, "p99_ms": p99, "p999_ms": p99 * 2, "mean_ms": p99 / 2}
        # End to end adds the source's delay, the same for both: the goals must not use it.
        e2e = {k: v + 100.0 for k, v in stats.items()}
        return {"rate": rate, "scheduled": 10, "received": 10, "e2e": e2e, "shuffle": stats}

    recorder = Recorder("latency", "sluice bench latency", {"rounds": 1})
    for config in latency.CONFIGS:
        sluice_p99 = 3.0 if config[1] == 50 else 1.2
        recorder.runs.append({"config": config[0], "contender": "sluice", "phases": [phase(1000, sluice_p99)]})
        recorder.runs.append({"config": config[0], "contender": "builtin", "phases": [phase(1000, 6.0)]})
    latency.summarize(recorder, latency.CONFIGS)
    ratio_goals = {g["goal"]: g["met"] for g in recorder.goals if g["goal"].startswith("p99")}
    # Only the equal intervals have a ratio goal (not the defaults), and it is a quarter: 0.2 meets
    # it, 0.5 does not.
    assert ratio_goals == {
        "p99 through the shuffle, Sluice / built-in, both flush every 5 ms, 1000/s": True,
        "p99 through the shuffle, Sluice / built-in, both flush every 50 ms, 1000/s": False,
    }
    assert len(recorder.summary["table"]) == 6


def test_a_timed_job_starts_after_the_previous_jobs_objects_are_released() -> None:
    """release_finished_jobs frees what only a Python reference cycle still holds (a DataFrame
    keeping its Java query execution, and so its broadcasts, alive) and runs the driver's GC, which
    is what lets Spark's ContextCleaner remove those broadcasts."""
    driver_gcs: List[int] = []
    system = types.SimpleNamespace(gc=lambda: driver_gcs.append(1))
    fake = types.SimpleNamespace(
        sparkContext=types.SimpleNamespace(
            _jvm=types.SimpleNamespace(java=types.SimpleNamespace(lang=types.SimpleNamespace(System=system)))
        )
    )

    class Held:
        pass

    gc.disable()  # no automatic collection between the two assertions
    try:
        held = Held()
        cycle: List[Any] = [held]
        cycle.append(cycle)
        alive = weakref.ref(held)
        del held, cycle
        assert alive() is not None  # only the cyclic collector frees it
        session.release_finished_jobs(fake, pause_s=0)  # type: ignore[arg-type]
        assert alive() is None
    finally:
        gc.enable()
    assert driver_gcs == [1]


def test_tpchgen_is_found_beside_an_interpreter_whose_environment_was_never_activated(tmp_path: Path) -> None:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    interpreter = str(bin_dir / "python")
    empty_path = str(tmp_path / "nothing-here")
    assert tpch.find_tpchgen(path=empty_path, interpreter=interpreter) is None
    tool = bin_dir / "tpchgen-cli"
    tool.write_text("#!/bin/sh\n")
    assert tpch.find_tpchgen(path=empty_path, interpreter=interpreter) is None  # not executable
    tool.chmod(0o755)
    assert tpch.find_tpchgen(path=empty_path, interpreter=interpreter) == str(tool)
    on_path = tmp_path / "on-path"
    on_path.mkdir()
    (on_path / "tpchgen-cli").write_text("#!/bin/sh\n")
    (on_path / "tpchgen-cli").chmod(0o755)
    assert tpch.find_tpchgen(path=str(on_path), interpreter=interpreter) == str(on_path / "tpchgen-cli")


def test_tpch_has_all_22_queries_and_scale_configs() -> None:
    assert sorted(tpch.QUERIES) == list(range(1, 23))
    for number, text in tpch.QUERIES.items():
        assert text.strip().lower().startswith(("select", "with")), number
    assert tpch.default_data_dir(1).name == "tpch-sf1"
    assert tpch.default_data_dir(0.01).name == "tpch-sf0.01"
    names = [c["name"] for c in scale.configs(1000, quick=False)]
    assert names == ["size x1", "size x4", "size x16", "parts 10x10", "parts 50x50", "parts 200x200"]
    assert [c["name"] for c in scale.wide_configs(1000, quick=False)] == [
        "wide 1500x400",
        "wide 6000x400",
        "wide 4000x200",
        "wide 200x4000",
        "wide 4000x1000",
    ]
    assert [(c["maps"], c["reduces"]) for c in scale.growth_configs(quick=False)] == [(1000, 1000), (10000, 1000)]
    assert [(c["maps"], c["reduces"]) for c in scale.wide_configs(1000, quick=True)] == [(300, 100)]


def test_scale_floor_bounds_the_ratio_and_its_answers_are_not_compared() -> None:
    """--floor's runs (a shuffle that moves nothing) give floor_s and floor / sort per shape; their
    answers, wrong by design, are neither compared nor counted."""
    wide = scale.wide_configs(1000, quick=False)[:1]

    def run(contender: str, seconds: float, answer: List[List[Any]]) -> Dict[str, Any]:
        return {
            "contender": contender,
            "round": 1,
            "runs": {
                c["name"]: {
                    "seconds": seconds,
                    "answer": answer,
                    "shuffle_write_bytes": 10,
                    "driver_process_cpu_s": seconds / 2,
                }
                for c in wide
            },
        }

    right = [[1, wide[0]["rows"], 2]]
    recorder = Recorder("scale", "sluice bench scale --floor", {"rounds": 1})
    recorder.runs += [run("sluice", 3.0, right), run("sort", 4.0, right), run(scale.FLOOR, 2.0, [[0, 0, 0]])]
    scale.summarize(recorder, wide)
    summary = recorder.summary["configs"]["wide 1500x400"]
    assert summary["floor_s"] == 2.0 and summary["floor_ratio"] == 0.5 and summary["ratio"] == 0.75
    assert summary["driver_cpu_s"] == {"sluice": 1.5, "sort": 2.0, scale.FLOOR: 1.0}
    assert not recorder.mismatches
    recorder.runs[0]["runs"]["wide 1500x400"]["answer"] = [[1, 7, 2]]
    scale.summarize(recorder, wide)
    assert len(recorder.mismatches) == 1, "Sluice's answers are still checked against the sort shuffle's"
    recorder.runs.pop(2)
    scale.summarize(recorder, wide)
    assert "floor_s" not in recorder.summary["configs"]["wide 1500x400"], "no floor without --floor"
    assert recorder.summary["configs"]["wide 1500x400"]["driver_cpu_s"] == {"sluice": 1.5, "sort": 2.0}


def test_scale_service_runs_give_the_ratio_to_sluice_and_are_checked_against_sort(tmp_path: Path) -> None:
    """--service's runs (Sluice, map outputs served by its node service) give service_s and
    service / sluice per shape, the goal at 1500 x 400, and their answers are checked."""
    wide = scale.wide_configs(1000, quick=False)[:1]

    def run(contender: str, seconds: float, answer: List[List[Any]]) -> Dict[str, Any]:
        runs = {c["name"]: {"seconds": seconds, "answer": answer, "shuffle_write_bytes": 10} for c in wide}
        return {"contender": contender, "round": 1, "runs": runs}

    right = [[1, wide[0]["rows"], 2]]
    recorder = Recorder("scale", "sluice bench scale --service", {"rounds": 1})
    recorder.runs += [run("sluice", 4.0, right), run("sort", 8.0, right), run("sluice-service", 4.1, right)]
    scale.summarize(recorder, wide)
    summary = recorder.summary["configs"]["wide 1500x400"]
    assert summary["service_s"] == 4.1 and summary["service_ratio"] == pytest.approx(4.1 / 4.0)
    assert "service_cpu_s" not in summary, "no service CPU where it was not measured"
    # The service's CPU, measured, is added to its executors' against the executors serving themselves.
    recorder.runs[0]["runs"]["wide 1500x400"]["executor_process_cpu_s"] = 10.0
    recorder.runs[2]["runs"]["wide 1500x400"].update(executor_process_cpu_s=8.5, service_process_cpu_s=2.5)
    scale.summarize(recorder, wide)
    summary = recorder.summary["configs"]["wide 1500x400"]
    assert summary["service_cpu_s"] == {"service": 2.5, "executors": 8.5}
    assert summary["service_cpu_ratio"] == pytest.approx(1.1)
    (service_goal,) = [g for g in recorder.goals if "node service" in g["goal"]]
    assert service_goal["target"] == 1.05 and service_goal["met"]
    assert not recorder.mismatches
    assert scale.draw(tmp_path / "scale-wide-service.png", clean_floats(recorder.result())).is_file()
    recorder.runs[2]["runs"]["wide 1500x400"]["answer"] = [[1, 7, 2]]
    scale.summarize(recorder, wide)
    assert recorder.mismatches == [
        "round 1, sluice-service, wide 1500x400: " + recorder.mismatches[0].split(": ", 1)[1]
    ]
    recorder.runs.pop(2)
    scale.summarize(recorder, wide)
    assert "service_s" not in recorder.summary["configs"]["wide 1500x400"]
    assert not [g for g in recorder.goals if "node service" in g["goal"]], "no service goal without --service"


def test_the_node_service_is_primed_by_one_unmeasured_application(monkeypatch: pytest.MonkeyPatch) -> None:
    """--service runs one sluice-service application before the measured rounds (a node service
    outlives applications); its time and the service's CPU are kept apart from every median, and
    a failed priming names itself."""
    started: List[Any] = []

    def run_app(kind: str, contender: str, spec: Dict[str, Any], **kw: Any) -> Dict[str, Any]:
        started.append((kind, contender, spec["service_port"]))
        run = {"seconds": 9.5, "answer": [[1]], "service_process_cpu_s": 4.0, "service_cpu_by_thread": {"jit": 2.0}}
        return {"contender": contender, "runs": {"wide 1500x400": run}}

    monkeypatch.setattr(scale, "run_app", run_app)
    primed = scale.prime_service({"service_port": 7337}, timeout=60)
    assert started == [("scale", "sluice-service", 7337)]
    assert primed == {
        "wide 1500x400": {"seconds": 9.5, "service_process_cpu_s": 4.0, "service_cpu_by_thread": {"jit": 2.0}}
    }

    def failing(*args: Any, **kw: Any) -> Dict[str, Any]:
        raise BenchError("the application failed: boom")

    monkeypatch.setattr(scale, "run_app", failing)
    with pytest.raises(BenchError, match="priming the node service failed: the application failed: boom"):
        scale.prime_service({"service_port": 7337}, timeout=60)


def test_batch_service_runs_are_timed_against_sluices() -> None:
    def app(contender: str, t: float, r: int) -> Dict[str, Any]:
        return {
            "contender": contender,
            "round": r,
            "heavy": {"seconds": t, "shuffle_write_bytes": 10, "answer": [[1]]},
            "tpch": {"1": {"seconds": t / 2, "shuffle_write_bytes": 10, "answer": [[1.0]]}},
        }

    results = {
        c: [app(c, t, 1), app(c, t + 2, 2)] for c, t in (("sluice", 10.0), ("sort", 20.0), ("sluice-service", 10.6))
    }
    recorder = Recorder("batch", "sluice bench batch --service", {"rounds": 2})
    spec = {"heavy": {"rows": 1}, "tpch": {"queries": [1]}}
    batch.summarize({"defaults": results}, recorder, {"defaults": spec})
    service = recorder.summary["settings"]["defaults"]["service"]
    assert service["heavy_ratio"] == pytest.approx(11.6 / 11.0)
    assert service["tpch_ratio"] == pytest.approx(5.8 / 5.5)
    assert service["tpch_queries"]["1"]["ratio"] == pytest.approx(5.8 / 5.5)
    goals = {g["goal"]: g for g in recorder.goals if "node service" in g["goal"]}
    assert len(goals) == 2 and all(g["target"] == 1.05 and not g["met"] for g in goals.values()), goals
    without = Recorder("batch", "sluice bench batch", {"rounds": 2})
    batch.summarize({"defaults": {c: results[c] for c in ("sluice", "sort")}}, without, {"defaults": spec})
    assert "service" not in without.summary["settings"]["defaults"]


def test_service_results_are_saved_beside_the_plain_ones() -> None:
    """A --service run writes its own result (scale[-group]-service, batch-service): the plain
    runs' results, which docs/benchmarks.md quotes, stay as they are."""
    assert scale.plan(scale_args(groups="wide", shapes="1500x400", service=True))[0] == "scale-wide-service"
    assert scale.plan(scale_args(groups="classic,wide", service=True))[0] == "scale-service"
    assert scale.plan(scale_args(groups="wide"))[0] == "scale-wide"
    assert batch.result_name(argparse.Namespace(short=False, service=True)) == "batch-service"
    assert batch.result_name(argparse.Namespace(short=False, service=False)) == "batch"


def test_host_local_runs_set_spark_s_setting_for_every_contender_and_save_beside() -> None:
    """--host-local: Spark turns host-local disk reads off on local-cluster masters unless they
    are set, so the flag sets spark.shuffle.readHostLocalDisk=true in the spec's conf (every
    contender's, not the sort shuffle's alone) and saves the result beside the plain one."""
    plain = batch.spec_for(batch_args())
    host_local = batch.spec_for(batch_args(host_local=True))
    assert "spark.shuffle.readHostLocalDisk" not in plain["conf"]
    assert host_local["conf"]["spark.shuffle.readHostLocalDisk"] == "true" and host_local["builtin_conf"] == {}
    assert batch.result_name(argparse.Namespace(short=False, job="sha2", host_local=True)) == "batch-sha2-host-local"
    name, apps = scale.plan(scale_args(groups="wide", shapes="1500x400", host_local=True))
    assert name == "scale-wide-host-local"
    assert all(a.spec["conf"]["spark.shuffle.readHostLocalDisk"] == "true" for a in apps)
    assert all(
        "spark.shuffle.readHostLocalDisk" not in a.spec["conf"] for a in scale.plan(scale_args(groups="wide"))[1]
    )


def test_a_node_service_daemon_starts_reports_and_stops(tmp_path: Path) -> None:
    """The --service runs' daemon: ``sluice shuffle-service`` on a free port of 127.0.0.1, its
    status read back (nothing registered, nothing on disk), stopped when the run ends; a port
    another process holds is an error naming the port and the daemon's log."""
    log = service.service_log(tmp_path, "smoke")
    with service.NodeService(log) as node:
        assert node.process is not None and node.process.poll() is None
        status = node.status()
        assert status["registeredApplications"] == 0 and status["diskFiles"] == 0, status
    assert node.process.poll() is not None, "the daemon outlived its run"
    assert node.status() == {}, "a stopped daemon has no status"
    assert log.is_file()
    taken = service.NodeService(tmp_path / "taken.log")
    with socket.socket() as holder:
        holder.bind((taken.host, taken.port))
        holder.listen()
        with pytest.raises(BenchError, match=rf"did not start on 127\.0\.0\.1:{taken.port} .*taken\.log"):
            with taken:
                pass
    assert taken.process is not None and taken.process.poll() is not None


def test_the_allocation_application_reads_through_a_node_service(tmp_path: Path) -> None:
    """A tiny run of ``sluice bench allocation``'s application as the sluice-service contender,
    on local-cluster against a real node service: the bursty job's answer is exact (every row
    counted once, every value summed), the executor-seconds come from the application's REST API
    within the job's window, and the reduce tasks read the map outputs through the service."""
    from sluice_bench.apps import run_app

    maps, rows_per_map = 6, 500
    with service.NodeService(service.service_log(tmp_path, "allocation")) as node:
        spec = {
            # Two executors of one core, both there before the job: each writes map outputs, so
            # every reducer reads some from the other executor's, through the service.
            "master": "local-cluster[2,1,1024]",
            "conf": {
                "spark.executor.memory": "512m",
                "spark.scheduler.minRegisteredResourcesRatio": "1.0",
                "spark.scheduler.maxRegisteredResourcesWaitingTime": "300s",
            },
            "job": {"maps": maps, "rows_per_map": rows_per_map, "reducers": 2, "reduce_seconds": 0.2},
            "service_port": node.port,
        }
        result = run_app("allocation", "sluice-service", spec, timeout=600, log_dir=tmp_path)
        status = node.status()
    n = maps * rows_per_map
    assert [row[0] for row in result["answer"]] == [0, 1], result["answer"]
    assert sum(row[1] for row in result["answer"]) == n
    assert sum(row[2] for row in result["answer"]) == n * (n - 1) // 2
    assert status["bytesSent"] > 0, status
    assert result["failed_tasks"] == 0 and len(result["stages"]) == 2
    assert len(result["executors"]) == 2 and all(e["removed_s"] is None for e in result["executors"]), result
    assert 0 < result["executor_seconds"] <= 2 * result["job_seconds"] + 0.01
    assert result["released_during_job"] == [] and result["live_at_end"] == 2, result
    assert result["live_counts"][-1] == [round(result["job_seconds"], 3), 2]
    # Each stage's timeline: every task counted once, on the executors that ran them.
    maps_stage, reduce_stage = result["stage_timelines"]
    assert sum(e["tasks"] for e in maps_stage["per_executor"].values()) == maps, maps_stage
    assert sum(e["tasks"] for e in reduce_stage["per_executor"].values()) == 2, reduce_stage
    assert set(maps_stage["per_executor"]) <= {e["id"] for e in result["executors"]}, maps_stage
    assert 0 <= maps_stage["submitted_s"] <= maps_stage["completed_s"] <= reduce_stage["completed_s"], result
    assert all(0 <= e["run_s"] <= e["busy_s"] for e in maps_stage["per_executor"].values()), maps_stage


def test_allocation_counts_executor_seconds_within_the_job() -> None:
    def at(seconds: float) -> str:
        return (
            datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
            + "GMT"
        )

    start = 1_800_000_000.0
    executors = [
        {"id": "driver", "addTime": at(start - 50)},
        {"id": "1", "hostPort": "10.77.0.11:4000", "addTime": at(start + 2), "removeTime": at(start + 72)},
        {"id": "2", "hostPort": "10.77.0.12:4000", "addTime": at(start + 3)},  # alive at the end
        {"id": "3", "hostPort": "10.77.0.12:4001", "addTime": at(start - 5), "removeTime": at(start + 150)},
    ]
    total, lives = jobs_allocation.executor_seconds(executors, start, start + 100)
    # 70 s, 97 s, and 100 s of the window (added before it, removed after it).
    assert total == pytest.approx(70 + 97 + 100, abs=0.01)
    assert [life["id"] for life in lives] == ["3", "1", "2"] and lives[1]["host"] == "10.77.0.11"
    assert lives[1]["removed_s"] == pytest.approx(72) and lives[2]["removed_s"] is None
    # Idle since its last task's end; an executor that ran none of the job's tasks since it was added.
    ends = {"1": start + 10.0}
    assert jobs_allocation.idle_since(lives[1], start, ends) == pytest.approx(start + 10)
    assert jobs_allocation.idle_since(lives[2], start, ends) == pytest.approx(start + 3)
    assert jobs_allocation.idle_since(lives[1], start, {"1": start - 1}) == pytest.approx(start + 2)
    steps = jobs_allocation.live_counts(lives, 100.0)
    assert [c for _, c in steps] == [0, 1, 2, 3, 2, 2]
    assert steps[-1][0] == 100.0


def test_allocation_spec_summary_goals_and_chart(tmp_path: Path) -> None:
    args = argparse.Namespace(
        quick=False,
        maps=None,
        rows_per_map=None,
        reducers=2,
        reduce_seconds=None,
        idle_timeout=None,
        max_executors=4,
        executor_memory="768m",
        option=[],
    )
    spec = allocation.spec_for(args)
    assert spec["job"] == {"maps": 200, "rows_per_map": 20_000, "reducers": 2, "reduce_seconds": 120.0}
    assert spec["conf"]["spark.dynamicAllocation.maxExecutors"] == "4"
    assert spec["conf"]["spark.dynamicAllocation.executorIdleTimeout"] == "60s"
    # Spark's service for the sort shuffle; shuffle tracking only for Sluice without its service.
    cc = spec["contender_conf"]
    assert cc["sort"]["spark.shuffle.service.enabled"] == "true"
    assert cc["sluice"]["spark.dynamicAllocation.shuffleTracking.enabled"] == "true"
    assert cc["sluice-service"]["spark.dynamicAllocation.shuffleTracking.enabled"] == "false"
    assert allocation.parse_contenders("sluice-service, sort") == ["sluice-service", "sort"]
    with pytest.raises(BenchError, match="--contenders"):
        allocation.parse_contenders("sluice,yarn")

    def run(contender: str, r: int, seconds: float, idle: List[float], answer: List[List[int]]) -> Dict[str, Any]:
        return {
            "contender": contender,
            "round": r,
            "answer": answer,
            "executor_seconds": seconds,
            "job_seconds": 150.0,
            "peak_executors": 4,
            "live_at_end": 4 - len(idle),
            "released_during_job": [{"id": str(i), "idle_s": s} for i, s in enumerate(idle)],
            "live_counts": [[0.0, 0], [5.0, 4], [150.0, 4 - len(idle)]],
            "failed_tasks": 0,
        }

    right = [[0, 10, 45], [1, 10, 55]]
    runs = {
        "sort": [run("sort", 1, 400.0, [61.0, 62.0], right), run("sort", 2, 420.0, [61.5, 60.5], right)],
        "sluice": [run("sluice", 1, 560.0, [], right), run("sluice", 2, 580.0, [], right)],
        "sluice-service": [
            run("sluice-service", 1, 390.0, [60.5, 63.0], right),
            run("sluice-service", 2, 410.0, [61.0, 61.0], [[0, 10, 45], [1, 9, 55]]),
        ],
    }
    recorder = Recorder("allocation", "sluice bench allocation", {"rounds": 2})
    recorder.runs += [r for mine in runs.values() for r in mine]
    allocation.check_answers(runs, recorder)
    assert recorder.summary["answers_checked"] == 4
    assert recorder.mismatches == ["round 2, sluice-service: " + recorder.mismatches[0].split(": ", 1)[1]]
    allocation.summarize(runs, 60.0, recorder)
    s = recorder.summary
    assert s["service_over_sort"] == pytest.approx(400 / 410)
    assert s["tracking_over_sort"] == pytest.approx(570 / 410)
    assert s["contenders"]["sluice-service"]["idle_before_release_s"]["max"] == 63.0
    assert s["contenders"]["sluice"]["released_during_job"] == 0
    goals = {g["goal"]: g for g in recorder.goals}
    assert len(goals) == 2 and all(g["met"] for g in goals.values()), goals
    result = clean_floats(recorder.result())
    json.dumps(result, allow_nan=False)
    assert allocation.draw(tmp_path / "allocation.png", result).is_file()


def test_scale_summary_has_the_wide_goal_memory_and_failures(tmp_path: Path) -> None:
    """The wide group's runs sit beside the others; a failed Sluice run is a failure (no time),
    not a mismatch; the 1500x400 goals (time, fetch wait), the control messages beyond the frames
    and the network memory against its budget are reported."""
    narrow = scale.configs(1000, quick=True)[:1]
    wide = scale.wide_configs(1000, quick=False)

    def run(contender: str, configs: List[Dict[str, Any]], seconds: float, failed: str = "") -> Dict[str, Any]:
        runs: Dict[str, Any] = {}
        for c in configs:
            if c["name"] == failed:
                runs[c["name"]] = {"seconds": None, "answer": None, "error": "InsufficientNetworkBuffersException"}
                continue
            runs[c["name"]] = {"seconds": seconds, "answer": [[1, c["rows"], 2]], "shuffle_write_bytes": 10}
            runs[c["name"]]["shuffle_fetch_wait_ms"] = 10 if contender == "sluice" else 40
            # Both contenders' connections are watched; only Sluice's count for the goal.
            runs[c["name"]]["connections"] = {"0->1": 1 if contender == "sluice" else 3, "1->0": 1}
            if contender == "sluice":
                runs[c["name"]]["network_memory"] = {"peak_used_bytes": 48 << 20, "budget_bytes": 64 << 20}
                runs[c["name"]]["fan_in"] = {
                    "readers": 4,
                    "channels_max": 2,
                    "numInputChannels_mean": 2.0,
                    "numPartitionRequests_mean": 1.0,
                    "numControlMessages_mean": 12.0,
                    "numBuffersInRemote_mean": 9.0,
                }
        return {"contender": contender, "round": 1, "runs": runs}

    recorder = Recorder("scale", "sluice bench scale", {"rounds": 1})
    for r in [run("sluice", narrow, 1.0), run("sort", narrow, 2.0)]:
        for job in r["runs"].values():
            job["executor_process_cpu_s"] = 3.0 if r["contender"] == "sluice" else 4.0
            job["shuffle_write_bytes"] = 2 * 10**9
        recorder.runs.append(r)
    recorder.runs += [
        run("sluice", wide, 1.6, failed="wide 4000x200"),
        run("sort", wide, 4.0),
    ]
    scale.summarize(recorder, narrow + wide)
    configs = recorder.summary["configs"]
    assert configs["wide 1500x400"]["ratio"] == 0.4 and configs["size x1"]["ratio"] == 0.5
    assert configs["wide 1500x400"]["fetch_wait_ratio"] == 0.25
    assert configs["wide 1500x400"]["fan_in"]["control_messages_per_reducer"] == 12.0
    assert math.isnan(configs["wide 4000x200"]["sluice_s"]) and configs["wide 4000x200"]["sort_s"] == 4.0
    assert configs["wide 200x4000"]["network_peak_over_budget"] == 0.75
    assert [f.split(":")[0] for f in recorder.summary["failures"]] == ["round 1, sluice, wide 4000x200"]
    assert not recorder.mismatches
    goals = {g["goal"]: g for g in recorder.goals}
    assert goals["Sluice / sort time at wide 1500x400"]["met"]
    assert goals["reducers' summed fetch wait, Sluice / sort, at wide 1500x400"]["value"] == 0.25
    assert goals["Sluice / sort time at wide 200x4000"]["met"]
    assert not goals["Sluice / sort time at wide 4000x200"]["met"], "a failed run misses its goal"
    beyond = goals["control messages per reducer minus remote frames received (most over the wide shapes)"]
    assert beyond["value"] == 3.0 and beyond["met"]
    assert goals["Sluice's peak network memory / budget (any shape)"]["value"] == 0.75
    assert goals["TCP connections per executor pair and direction (most seen)"]["met"]
    assert recorder.summary["max_connections_per_pair"] == 1 and recorder.summary["sort_max_connections_per_pair"] == 3
    # CPU per GB: only the size x1 runs measured it (3 and 4 s over the sort shuffle's 2 GB).
    assert configs["size x1"]["cpu"]["sluice"]["process_cpu_s_per_gb"] == 1.5
    assert configs["size x1"]["cpu"]["ratio"] == 0.75 and math.isnan(configs["wide 1500x400"]["cpu"]["ratio"])
    assert recorder.summary["cpu_all_jobs"]["sort_process_cpu_s_per_gb"] == 2.0
    assert goals["executor CPU s per GB shuffled, Sluice / sort, all jobs together"]["value"] == 0.75
    result = clean_floats(
        {
            "summary": recorder.summary,
            "settings": {"rounds": 1},
            "machine": {"nproc": 2, "load_before": [1.0], "load_after": [1.0]},
        }
    )
    assert scale.draw(tmp_path / "scale.png", result).is_file()


def batch_args(**values: Any) -> argparse.Namespace:
    """``sluice bench batch --quick``'s arguments (TPC-H Q1 only, no TPC-H run), with ``values``."""
    defaults: Dict[str, Any] = dict(
        quick=True, heavy_rows=None, scale=None, queries="1", no_heavy=False, no_tpch=True, memory="1024"
    )
    return argparse.Namespace(**dict(defaults, **values))


def scale_args(**values: Any) -> argparse.Namespace:
    defaults: Dict[str, Any] = dict(
        quick=False, rounds=None, base_rows=None, memory="2048", groups="extreme", option=[], shapes=None
    )
    return argparse.Namespace(**dict(defaults, **values))


def test_scale_extreme_runs_each_shape_alone_once_with_a_deadline() -> None:
    """The extreme group: 100,000 x 200 and 20,000 x 2,000, one row per map and reducer, each shape
    in applications of its own (one round unless asked, the other groups keep 2) on
    local-cluster[2,2,MEM] with MEM executors, a bigger driver and a deadline per job."""
    name, apps = scale.plan(scale_args(memory="3072"))
    assert name == "scale-extreme" and scale.result_name(scale_args()) == "scale-extreme"
    shapes = [(c["name"], c["maps"], c["reduces"], c["rows"]) for a in apps for c in a.spec["configs"]]
    assert shapes == [
        ("extreme 100000x200", 100_000, 200, 20_000_000),
        ("extreme 20000x2000", 20_000, 2_000, 40_000_000),
    ]
    for a in apps:
        assert a.group == "extreme" and a.rounds == 1 and a.spec["master"] == "local-cluster[2,2,3072]"
        assert a.spec["conf"]["spark.executor.memory"] == "3072m"
        assert a.spec["conf"]["spark.driver.memory"] == scale.EXTREME_DRIVER_MEMORY
        assert a.spec["conf"]["spark.sql.adaptive.enabled"] == "false"
        assert a.spec["job_timeout_s"] == scale.EXTREME_JOB_TIMEOUT_S < a.timeout
        assert a.spec["warmup"]["maps"] == 16
    _, apps = scale.plan(scale_args(groups="wide,extreme", option=["buffers_per_channel=8"]))
    assert [(a.group, a.rounds) for a in apps] == [("wide", 2), ("extreme", 1), ("extreme", 1)]
    assert "job_timeout_s" not in apps[0].spec and "spark.driver.memory" not in apps[0].spec["conf"]
    assert all(a.spec["sluice_options"] == {"buffers_per_channel": "8"} for a in apps)
    _, apps = scale.plan(scale_args(rounds=3, quick=True))
    assert [(a.rounds, a.spec["configs"][0]["maps"]) for a in apps] == [(3, 2000), (3, 400)]
    with pytest.raises(SystemExit, match="classic, wide, growth, extreme"):
        scale.plan(scale_args(groups="extreme,huge"))


def test_scale_extreme_failures_are_results() -> None:
    """A contender whose job was cancelled at the deadline, or whose application died, has not
    completed and is listed as a failure; the other's answer is then checked against the rows the
    job generated; the goal of the group is that Sluice completes."""
    configs = scale.extreme_configs(quick=True)
    recorder = Recorder("scale-extreme", "sluice bench scale --groups extreme", {"rounds": 1})
    first, second = configs
    ok = {"seconds": 50.0, "answer": [[7, first["rows"], 3]], "shuffle_write_bytes": 10, "shuffle_fetch_wait_ms": 5}
    late = {"seconds": None, "answer": None, "error": "no answer within 1500 s (the benchmark cancelled the job)"}
    recorder.runs += [
        {"contender": "sluice", "round": 1, "runs": {first["name"]: ok}},
        {"contender": "sort", "round": 1, "runs": {first["name"]: late}},
        dict(scale.failed_app(dict(configs=[second]))("sluice", "scale/sluice failed (exit 52)"), round=1),
        {"contender": "sort", "round": 1, "runs": {second["name"]: dict(ok, answer=[[7, second["rows"] - 1, 3]])}},
    ]
    scale.summarize(recorder, configs)
    s = recorder.summary["configs"]
    assert s[first["name"]]["completed"] == {"sluice": True, "sort": False}
    assert s[second["name"]]["completed"] == {"sluice": False, "sort": True}
    assert math.isnan(s[first["name"]]["ratio"]) and s[second["name"]]["sort_s"] == 50.0
    assert [f.split(":")[0] for f in recorder.summary["failures"]] == [
        f"round 1, sort, {first['name']}",
        f"round 1, sluice, {second['name']}",
    ]
    assert "exit 52" in recorder.summary["failures"][1]
    # Sluice's answer had no sort answer beside it and counted every row; the sort shuffle's lost one.
    assert recorder.mismatches == [
        f"round 1, sort, {second['name']}: counted {second['rows'] - 1} rows of {second['rows']} "
        "(the other contender gave no answer)"
    ]
    goals = {g["goal"]: g["met"] for g in recorder.goals}
    assert goals[f"Sluice completes {first['name']}"] and not goals[f"Sluice completes {second['name']}"]
    scale.summarize(recorder, configs)  # again, after the next group: nothing counted twice
    assert len(recorder.mismatches) == 1 and len(recorder.goals) == len(goals)


def test_a_job_past_its_deadline_is_cancelled_and_says_so() -> None:
    cancelled: List[str] = []
    spark: Any = types.SimpleNamespace(sparkContext=types.SimpleNamespace(cancelJobGroup=cancelled.append))
    with jobs.JobDeadline(spark, "extreme 2000x20", 0.05) as deadline:
        assert deadline.expired.wait(5)
    assert cancelled == ["extreme 2000x20"]
    assert deadline.error(RuntimeError("Job 3 cancelled")).startswith("no answer within 0 s (the benchmark")
    with jobs.JobDeadline(spark, "other", None) as never:
        pass
    assert not never.expired.is_set() and never.error(RuntimeError("x")) == "RuntimeError: x"
    assert cancelled == ["extreme 2000x20"]


def test_cluster_link_rates_come_from_the_sampled_byte_counters() -> None:
    # A link's received-bytes counter read every 0.1 s over 4 s: 2 s at 1 Gbit/s, 1 s idle, 1 s at 0.5 Gbit/s.
    times, counts, total = [], [], 5000.0
    for i in range(41):
        times.append(100.0 + i / 10)
        counts.append(total)
        total += (125e6 if i < 20 else 0.0 if i < 30 else 62.5e6) / 10
    whole = cluster.window_traffic(times, counts, 100.0, 104.0, 1e9)
    assert whole["bytes"] == pytest.approx(312.5e6) and whole["seconds"] == pytest.approx(4.0)
    # In use (at least 5 % of the rate) for 3 of the 4 s; the best second ran at the full rate.
    assert whole["busy_seconds"] == pytest.approx(3.0) and whole["busy_bytes"] == pytest.approx(312.5e6)
    assert whole["peak_bytes_per_s"] * 8 == pytest.approx(1e9)
    rates = cluster.link_rates([whole], 1e9)
    assert rates["mean_bps"] == pytest.approx(625e6) and rates["read_bps"] == pytest.approx(312.5e6 * 8 / 3)
    assert rates["read_fraction"] == pytest.approx(312.5e6 * 8 / 3 / 1e9)
    # Window edges between samples: the counter is interpolated, so a second at full rate is exactly that.
    edge = cluster.window_traffic(times, counts, 100.05, 101.05, 1e9)
    assert edge["bytes"] == pytest.approx(125e6) and edge["busy_seconds"] == pytest.approx(1.0)
    # Two stages' windows add up: 1.5 s at full rate and 1 s at half.
    two = cluster.link_rates(
        [
            cluster.window_traffic(times, counts, 100.5, 102.0, 1e9),
            cluster.window_traffic(times, counts, 103.0, 104.0, 1e9),
        ],
        1e9,
    )
    assert two["read_bps"] == pytest.approx((187.5e6 + 62.5e6) * 8 / 2.5) and two["stage_seconds"] == pytest.approx(2.5)
    assert two["peak_bps"] == pytest.approx(1e9)
    # The reduce stage is the one that read the most from other executors; TPC-H has one per query that did.
    stages = [
        {"stage": 1, "remote_bytes_read": 0},
        {"stage": 2, "remote_bytes_read": 9},
        {"stage": 3, "remote_bytes_read": 4},
    ]
    assert cluster.reduce_stage(stages)["stage"] == 2 and cluster.reduce_stage(stages[:1]) is None
    run = {"tpch": {"1": {"stages": stages[:1]}, "3": {"stages": stages}}, "heavy": {"stages": stages[2:]}}
    assert [s["stage"] for s in cluster.job_stages(run, "tpch")] == [2]
    assert [s["stage"] for s in cluster.job_stages(run, "heavy")] == [3] and cluster.job_stages(run, "wide") == []
    # The CPU-bound sha2 job runs in the heavy job's place: its stages and seconds are under "heavy".
    assert [s["stage"] for s in cluster.job_stages(run, "sha2")] == [3]
    assert cluster.job_seconds({"heavy": {"seconds": 7.5}}, "sha2") == 7.5


def test_cluster_runs_the_sha2_job_in_the_heavy_jobs_place() -> None:
    parser = argparse.ArgumentParser()
    cluster.add_arguments(parser)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--option", action="append", default=[])
    spec = cluster.spec_for(parser.parse_args(["--quick"]), ["sha2", "wide"])
    assert spec["heavy"]["job"] == "sha2" and spec["tpch"] is None and spec["wide"] is not None
    assert cluster.spec_for(parser.parse_args(["--quick"]), ["tpch"])["heavy"] is None
    with pytest.raises(cluster.BenchError, match="one of heavy and sha2"):
        cluster.run(parser.parse_args(["--jobs", "heavy,sha2"]))


def test_cluster_reads_a_namespaces_byte_counters_from_proc() -> None:
    rx, tx = cluster.read_counters(os.getpid(), "lo")
    assert rx >= 0 and tx >= 0
    with pytest.raises(cluster.BenchError, match="no device nosuchdev"):
        cluster.read_counters(os.getpid(), "nosuchdev")


def test_cli_lists_the_benchmarks() -> None:
    done = subprocess.run([sys.executable, "-m", "sluice.cli", "bench", "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for name in ("batch", "transport", "latency", "memory", "scale", "cluster", "allocation"):
        assert name in done.stdout
    done = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "bench", "batch", "--help"], capture_output=True, text=True
    )
    assert "--rounds" in done.stdout and "--quick" in done.stdout and "--out" in done.stdout
    assert "--short" in done.stdout and "--short-scale" in done.stdout
    spec = batch.spec_for(batch_args(queries="1,6", no_tpch=False))
    assert spec["heavy"]["rows"] == batch.QUICK_HEAVY_ROWS and spec["tpch"]["queries"] == [1, 6]
    assert spec["heavy"]["warm_rows"] is None  # run_batch's default: a fiftieth of the rows
    assert batch.spec_for(batch_args(warm_up_rows=5_000))["heavy"]["warm_rows"] == 5_000
    assert spec["conf"]["spark.sql.adaptive.enabled"] == "false"
    assert spec["builtin_conf"] == {}
    tuned = batch.spec_for(batch_args(sort_conf=["spark.shuffle.sort.bypassMergeThreshold=0"]))
    # Only the sort shuffle's runs get it (build_session applies builtin_conf to them alone).
    assert tuned["builtin_conf"] == {"spark.shuffle.sort.bypassMergeThreshold": "0"}
    assert "spark.shuffle.sort.bypassMergeThreshold" not in tuned["conf"]
    with pytest.raises(batch.BenchError, match="--sort-conf takes a Spark setting"):
        batch.spec_for(batch_args(sort_conf=["bypassMergeThreshold"]))
    done = subprocess.run([sys.executable, "-m", "sluice_bench", "scale", "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: sluice-bench scale") and "--groups" in done.stdout
    done = subprocess.run([sys.executable, "-m", "sluice.cli", "bench", "jar"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == bench_jar_path(), done.stderr


def test_rounds_are_checked_before_anything_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "bench", "memory", "--rounds", "0"], capture_output=True, text=True
    )
    assert done.returncode != 0 and "sluice bench: --rounds must be at least 1" in done.stderr


def test_the_benchmark_jar_holds_the_benchmark_classes() -> None:
    jar = Path(bench_jar_path())
    assert jar.name == "sluice-bench.jar" and jar.parent == Path(sluice_bench.__file__).resolve().parent / "jars"
    with zipfile.ZipFile(jar) as archive:
        classes = {name for name in archive.namelist() if name.endswith(".class")}
    for name in (
        "io/sluice/bench/TransportBenchmark",
        "io/sluice/bench/SimulatedClusterBenchmark",
        "org/apache/spark/shuffle/sluice/bench/SimulatedCluster",
        "org/apache/spark/shuffle/sluice/bench/ExecutorProbe",
        "org/apache/spark/shuffle/sluice/bench/ScheduledRateStream",
        "org/apache/spark/shuffle/sluice/bench/LatencyProbeWriter",
    ):
        assert f"{name}.class" in classes
    # Only the benchmarks' own classes: the plugin's come from its jar.
    assert not [c for c in classes if "/bench/" not in c]


def test_modules_import_each_other_without_cycles() -> None:
    """Every import between sluice_bench's modules (also those inside functions) points one way."""
    package = Path(sluice_bench.__file__).resolve().parent
    graph: Dict[str, Set[str]] = {}
    for path in package.glob("*.py"):
        edges: Set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "sluice_bench":
                edges.update(alias.name for alias in node.names if (package / f"{alias.name}.py").is_file())
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sluice_bench."):
                edges.add((node.module or "").split(".")[1])
            elif isinstance(node, ast.Import):
                edges.update(a.name.split(".")[1] for a in node.names if a.name.startswith("sluice_bench."))
        graph[path.stem] = edges - {path.stem}
    assert graph["jobs"] and graph["worker"]  # the parse found imports

    def cycle_from(module: str, trail: List[str]) -> List[str]:
        if module in trail:
            return trail[trail.index(module) :] + [module]
        for imported in sorted(graph.get(module, ())):
            found = cycle_from(imported, trail + [module])
            if found:
                return found
        return []

    assert not [cycle for module in sorted(graph) if (cycle := cycle_from(module, []))]


def test_headline_numbers_agree_with_their_json() -> None:
    """README.md's and docs/benchmarks.md's headline tables say exactly what the result JSON says."""
    from sluice_bench import headlines

    root = Path(__file__).resolve().parent.parent
    assert headlines.stale_pages(root) == [], "run: python -m sluice_bench.headlines"
    readme = (root / "README.md").read_text(encoding="utf-8")
    for setting, label in headlines.SETTINGS.items():
        at = headlines.load(root, headlines.TPCH[setting])["summary"]["settings"][setting]
        assert f"time ({label}) | **{at['tpch_ratio']:.2f}** |" in readme
        # Every single query at least SLOWER_FROM of the sort shuffle's time is on the page, and no other.
        for query, q in at["tpch_queries"].items():
            line = f"TPC-H Q{query} alone, {label}: **{q['ratio']:.2f}**"
            assert (line in readme) == (q["ratio"] >= headlines.SLOWER_FROM), line
    assert "on dev/cluster at 10 Gbit/s links, one round: **1.08**" in readme
    # Read from the --cold run: its first shuffle is no longer slower (0.94), its queries are.
    assert "a fresh application's first jobs: TPC-H Q22 at SF 0.2" in readme
    assert "a fresh application's first jobs: its first shuffle" not in readme
    # Every row names its run's rounds and load as the JSON records them; one round stands out.
    growth = headlines.load(root, headlines.GROWTH)
    before, after = growth["machine"]["load_before"][0], growth["machine"]["load_after"][0]
    assert f"**1 round**, load {before:.1f} → {after:.1f} |" in readme
    # The page lists the newer runs the table passes over, with the value each gives.
    benchmarks = (root / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    transport = json.loads((root / "docs" / "benchmarks" / "transport-2026-11-26.json").read_text(encoding="utf-8"))
    assert (
        f"{headlines._iperf3(transport) * 100:.0f} % ([2026-11-26](benchmarks/transport-2026-11-26.json)" in benchmarks
    )


def copy_repository_results(root: Path, to: Path) -> None:
    """The two pages and every result file the generator reads, under ``to``."""
    from sluice_bench import headlines

    for page in headlines.PAGES:
        (to / page).parent.mkdir(parents=True, exist_ok=True)
        (to / page).write_text((root / page).read_text(encoding="utf-8"), encoding="utf-8")
    for directory in headlines.SEARCHED:
        (to / directory).mkdir(parents=True, exist_ok=True)
        for result in (root / directory).glob("*.json"):
            (to / directory / result.name).write_bytes(result.read_bytes())


def test_headline_check_fails_on_an_edited_number(tmp_path: Path) -> None:
    from sluice_bench import headlines

    root = Path(__file__).resolve().parent.parent
    copy_repository_results(root, tmp_path)
    assert headlines.stale_pages(tmp_path) == []
    readme = tmp_path / "README.md"
    text = readme.read_text(encoding="utf-8")
    tpch = headlines.load(root, headlines.TPCH["off64"])["summary"]["settings"]["off64"]["tpch_ratio"]
    readme.write_text(text.replace(f"| **{tpch:.2f}** |", "| **0.50** |", 1), encoding="utf-8")
    assert headlines.stale_pages(tmp_path) == ["README.md"]
    assert headlines.main(["--root", str(tmp_path), "--check"]) == 1
    assert headlines.main(["--root", str(tmp_path)]) == 0
    assert headlines.stale_pages(tmp_path) == []


def test_headline_generator_refuses_what_the_json_does_not_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A goal the run did not record, 'quiet' over a loaded run, 'median' of one round, 'hosts' for
    network namespaces, a newer run passed over without a reason (or a reason without one), and a
    phrase no result file can back: each stops the generator with a message naming it."""
    import dataclasses

    from sluice_bench import headlines

    root = Path(__file__).resolve().parent.parent
    copy_repository_results(root, tmp_path)
    original = headlines.HEADLINES

    def refused(*rows: headlines.Headline) -> str:
        monkeypatch.setattr(headlines, "HEADLINES", rows)
        with pytest.raises(headlines.UnbackedClaim) as e:
            headlines.render(tmp_path, "README.md")
        assert headlines.main(["--root", str(tmp_path), "--check"]) == 1
        assert "does not back" in capsys.readouterr().err or "records" in str(e.value)
        return str(e.value)

    tpch = next(h for h in original if h.result == headlines.TPCH["off64"])
    growth = next(h for h in original if h.result == headlines.GROWTH)
    cluster = next(h for h in original if h.result == headlines.CLUSTER)
    # The TPC-H run's load before was 4.7: not quiet.
    assert "'quiet'" in refused(dataclasses.replace(tpch, measure=tpch.measure + ", quiet"))
    assert "one round" in refused(dataclasses.replace(growth, measure="median " + growth.measure))
    assert "network namespaces" in refused(dataclasses.replace(cluster, measure="two hosts at 1 Gbit/s"))
    assert "not in" in refused(dataclasses.replace(tpch, goal="TPC-H total at most 0.85"))
    # A newer run of the same benchmark holding the same figure: the row must name it or say why not.
    newer = headlines.load(root, tpch.result)
    newer["started"] = "2099-01-01T00:00:00+00:00"
    (tmp_path / "bench" / "results" / "batch-sf1-off64-2099.json").write_text(json.dumps(newer), encoding="utf-8")
    assert "batch-sf1-off64-2099.json" in refused(tpch)
    with_reason = dataclasses.replace(tpch, newer="a reason")
    monkeypatch.setattr(headlines, "HEADLINES", (with_reason,))
    assert "batch-sf1-off64-2099.json" in headlines.headlines_block(tmp_path, "docs/benchmarks.md")
    (tmp_path / "bench" / "results" / "batch-sf1-off64-2099.json").unlink()
    assert "there are none" in refused(with_reason)
    # Anywhere on a page: no result file records what else ran.
    monkeypatch.setattr(headlines, "HEADLINES", original)
    assert headlines.stale_pages(tmp_path) == []
    page = tmp_path / "docs" / "benchmarks.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nMeasured with nothing else running.\n", encoding="utf-8")
    with pytest.raises(headlines.UnbackedClaim, match=r"docs/benchmarks.md:\d+ says 'nothing else running'"):
        headlines.render(tmp_path, "docs/benchmarks.md")


def test_scale_shapes_picks_shapes_of_the_chosen_groups() -> None:
    """--shapes keeps only the named shapes (maps x reducers) of the chosen groups, dropping a
    group left with none, and names a shape none of them has."""
    _, apps = scale.plan(scale_args(groups="wide,growth", shapes="1500x400, 6000x400"))
    assert [(a.group, [(c["maps"], c["reduces"]) for c in a.spec["configs"]]) for a in apps] == [
        ("wide", [(1500, 400), (6000, 400)])
    ]
    assert apps[0].spec["warmup"]["maps"] == 16 and apps[0].rounds == 2
    with pytest.raises(SystemExit, match=r"\[\(4000, 100\)\]"):
        scale.plan(scale_args(groups="wide", shapes="1500x400,4000x100"))
    with pytest.raises(SystemExit, match="MAPSxREDUCERS"):
        scale.plan(scale_args(groups="wide", shapes="1500 by 400"))


def simulated_args(**values: Any) -> argparse.Namespace:
    defaults: Dict[str, Any] = dict(quick=False, rounds=None, option=[], simulated=True, executors=None)
    return argparse.Namespace(**dict(defaults, **values))


def test_scale_simulated_runs_each_executor_count_in_a_jvm_then_the_index_shape() -> None:
    plans = simulated.plans(simulated_args())
    assert [(g, a[:2]) for g, a in plans] == [
        ("width", ["--executors", "16"]),
        ("width", ["--executors", "64"]),
        ("width", ["--executors", "256"]),
        ("index", ["--executors", "2"]),
        ("reports", []),
    ]
    index = plans[-2][1]
    assert index[index.index("--maps") + 1] == "4000" and index[index.index("--reducers") + 1] == "1000"
    assert index[index.index("--index-cache-sizes") + 1] == "0,1m,32m,1g"
    assert [a[1] for g, a in simulated.plans(simulated_args(quick=True)) if g == "width"] == ["4", "8"]
    options = simulated.plans(simulated_args(executors="3", option=["buffers_per_channel=4"]))[0][1]
    assert options == ["--executors", "3", "--spark.sluice.network.buffersPerChannel", "4"]
    for bad in ("a,b", "1", ""):
        if bad:
            with pytest.raises(BenchError, match="--executors"):
                simulated.plans(simulated_args(executors=bad))
    assert scale.result_name(simulated_args()) == simulated.NAME
    command = simulated.java_command(["--executors", "2"])
    assert command[0] == "java" and simulated.MAIN in command and "-Xmx3g" in command
    assert simulated.REPORTS_MAIN in simulated.java_command([], simulated.main_of("reports"))


def fake_simulated_run(group: str, executors: int, cache: str, ratio: float, prepared: int) -> Dict[str, Any]:
    stats = {"median": 10.0, "max": 20.0, "min": 5.0}
    return {
        "kind": "run",
        "group": group,
        "executors": executors,
        "maps": 4 * executors,
        "reducers": 2 * executors,
        "reduce_executors": executors,
        "prepare_peers": executors - 1,
        "index_cache_size": cache,
        "start_s": 1.0,
        "map_s": 2.0,
        "reduce_s": 3.0,
        "index_bytes_read": int(ratio * 1000),
        "index_bytes_needed": 1000,
        "index_read_ratio": ratio,
        "heap_retained_per_executor": 1 << 20,
        "other_descriptors_per_executor": 6.0,
        "read_from": 100,
        "read_from_prepared": prepared,
        "buffers_and_threads_back": True,
        "per_executor": {
            k: stats
            for k in (
                "threads",
                "fd_files",
                "fd_sockets",
                "client_connections",
                "peak_gate_bytes",
                "index_cache_bytes",
            )
        },
    }


def test_scale_simulated_summary_goals_and_chart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recorder = Recorder(simulated.NAME, "sluice bench scale --simulated", {"rounds": 1})
    recorder.runs += [
        fake_simulated_run("width", 16, "33554432", 0.4, 100),
        fake_simulated_run("width", 64, "33554432", 0.5, 100),
        fake_simulated_run("index", 2, "0", 1.0, 0),
        fake_simulated_run("index", 2, "1m", 1.1, 0),
        {"kind": "run", "group": "reports", "tasks": 8, "java_bytes": 8000, "codec_bytes": 4000}
        | {f"{c}_{op}_us": 10.0 for c in ("java", "codec") for op in ("encode", "decode")},
    ]
    simulated.summarize(recorder)
    assert recorder.summary["reports"]["8"]["codec_bytes"] == 4000
    assert recorder.summary["width"]["64"]["prepared_fraction"] == 1.0
    assert recorder.summary["index"]["1m"]["ratio"] == 1.1
    assert [g["met"] for g in recorder.goals] == [True, True, True]
    recorder.runs.append(fake_simulated_run("index", 2, "1g", 1.3, 0))
    recorder.runs[1] = fake_simulated_run("width", 64, "33554432", 0.5, 90)
    simulated.summarize(recorder)
    assert [(g["goal"], g["met"]) for g in recorder.goals][:2] == [
        ("index bytes read / needed, worst cache size", False),
        ("executors read from with a prepared connection, 64 executors", False),
    ]
    result = clean_floats(recorder.result())
    assert scale.draw(tmp_path / "scale-simulated.png", result).is_file()
    simulated.print_summary(recorder, tmp_path / "x.json", tmp_path / "x.png")
    out = capsys.readouterr().out
    assert "MISSED" in out and "a report of  8 tasks: Java-serialised 8,000 bytes" in out


def test_scale_simulated_jvm_prints_what_the_summary_reads() -> None:
    """A tiny run of SimulatedClusterBenchmark itself: three executors, then one at two index cache sizes."""
    runs = []
    for args in (
        ["--executors", "3", "--maps", "6", "--reducers", "3"],
        ["--executors", "2", "--maps", "8", "--reducers", "4", "--index-cache-sizes", "0,1m"],
    ):
        done = subprocess.run(simulated.java_command(args), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        runs += simulated.parse_runs(done.stdout)
    assert [(r["executors"], r["index_cache_size"]) for r in runs] == [(3, "33554432"), (2, "0"), (2, "1m")]
    recorder = Recorder(simulated.NAME, "test", {"rounds": 1})
    recorder.runs += [dict(r, group="width" if r["executors"] == 3 else "index") for r in runs]
    simulated.summarize(recorder)
    width = recorder.summary["width"]["3"]
    assert width["buffers_and_threads_back"] and width["prepared_fraction"] == 1.0, runs[0]
    assert len(runs[0]["executor_figures"]) == 3 and all(e["records"] > 0 for e in runs[0]["executor_figures"])
    assert recorder.summary["index"]["0"]["ratio"] == 1.0 and all(g["met"] for g in recorder.goals), recorder.goals


def test_report_cost_jvm_prints_what_the_summary_reads() -> None:
    """ReportCostBenchmark itself, timing a few calls: every report round-trips (it checks), and
    Sluice's codec writes a one-task report in fewer bytes than Java serialisation."""
    done = subprocess.run(
        simulated.java_command(["--quick"], simulated.REPORTS_MAIN), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = simulated.parse_runs(done.stdout)
    assert [r["tasks"] for r in runs] == [1, 8, 32]
    assert runs[0]["codec_bytes"] < runs[0]["java_bytes"] / 2, runs[0]
    assert all(r[f"{c}_{op}_us"] > 0 for r in runs for c in ("java", "codec") for op in ("encode", "decode"))
