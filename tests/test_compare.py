"""`sluice compare`: the verdict rule, the order of runs, reading an event log, and a small user
application compared for two rounds with spark-submit, the verdict present."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest
from sessions import app_env
from sluice import compare, eventlog

APP = """
import sys
from pyspark.sql import SparkSession, functions as F

rows = int(sys.argv[1])
spark = SparkSession.builder.appName("compare-me").getOrCreate()
spark.conf.set("spark.sql.shuffle.partitions", "4")
groups = spark.range(rows).select((F.col("id") % 1000).alias("k")).groupBy("k").count().collect()
joined = spark.range(rows).join(spark.range(rows // 2), "id").count()
print(len(groups), joined)
spark.stop()
"""


def test_a_difference_counts_only_beyond_the_spread() -> None:
    def s(*values: float) -> compare.Spread:
        return compare.spread(values)

    assert compare.verdict(s(10, 11, 12), s(7, 8, 9)) == "Sluice lower in every run"
    assert compare.verdict(s(10, 11, 12), s(13, 14)) == "Sluice higher in every run"
    assert compare.verdict(s(10, 11, 14), s(8, 9, 12)) == compare.NO_DIFFERENCE  # the spreads overlap
    assert compare.verdict(s(10), s(8)).startswith("one run each: no estimate of noise")
    assert s(3, 1, 2) == compare.Spread(median=2, least=1, most=3, runs=3)


def test_runs_alternate_and_the_first_contender_alternates_too() -> None:
    assert compare.order(2) == [(1, "sort"), (1, "sluice"), (2, "sluice"), (2, "sort")]
    with pytest.raises(ValueError, match="--rounds must be at least 1"):
        compare.order(0)


def event(kind: str, **fields: Any) -> str:
    return json.dumps({"Event": kind, **fields})


def test_an_event_log_gives_each_jobs_figures(tmp_path: Path) -> None:
    def task(stage: int, cpu_ns: int, written: int, wait_ms: int) -> str:
        metrics = {
            "Executor CPU Time": cpu_ns,
            "Shuffle Write Metrics": {"Shuffle Bytes Written": written},
            "Shuffle Read Metrics": {"Fetch Wait Time": wait_ms},
        }
        return event("SparkListenerTaskEnd", **{"Stage ID": stage, "Task Metrics": metrics})

    lines = [
        event("SparkListenerApplicationStart", **{"App ID": "app-1", "Timestamp": 1000}),
        event(
            "SparkListenerJobStart",
            **{
                "Job ID": 0,
                "Submission Time": 2000,
                "Stage IDs": [0, 1],
                "Stage Infos": [{"Stage ID": 0, "Stage Name": "map"}, {"Stage ID": 1, "Stage Name": "count at a.py:3"}],
            },
        ),
        task(0, 2_000_000_000, 500, 0),
        task(1, 1_000_000_000, 0, 300),
        event(
            "SparkListenerJobEnd", **{"Job ID": 0, "Completion Time": 5000, "Job Result": {"Result": "JobSucceeded"}}
        ),
        event(
            "SparkListenerJobStart",
            **{
                "Job ID": 1,
                "Submission Time": 6000,
                "Stage IDs": [1, 2],
                "Stage Infos": [{"Stage ID": 2, "Stage Name": "x"}],
            },
        ),
        task(2, 500_000_000, 0, 100),
        event(
            "SparkListenerJobEnd", **{"Job ID": 1, "Completion Time": 6500, "Job Result": {"Result": "JobSucceeded"}}
        ),
        event("SparkListenerApplicationEnd", Timestamp=9000),
    ]
    log = tmp_path / "app-1"
    log.write_text("\n".join(lines) + "\n")
    (tmp_path / "app-2.inprogress").write_text("")
    assert eventlog.find(tmp_path) == log
    app = eventlog.read(log)
    assert app.app_id == "app-1" and [j.name for j in app.jobs] == ["count at a.py:3", "x"]
    first, second = app.jobs
    assert first.succeeded and first.figures == eventlog.Figures(3.0, 3.0, 500, 0.3)
    assert second.figures == eventlog.Figures(0.5, 0.5, 0, 0.1)  # stage 1 ran for job 0, not again
    assert app.total == eventlog.Figures(8.0, 3.5, 500, 0.4)
    # Spark 4's rolling layout: a directory of numbered files, finished once its status file is.
    rolling = tmp_path / "rolling" / "eventlog_v2_app-1"
    rolling.mkdir(parents=True)
    (rolling / "events_2_app-1").write_text("\n".join(lines[5:]) + "\n")
    (rolling / "events_1_app-1").write_text("\n".join(lines[:5]) + "\n")
    (rolling / "appstatus_app-1.inprogress").write_text("")
    with pytest.raises(eventlog.EventLogError, match="expected one finished event log"):
        eventlog.find(rolling.parent)
    (rolling / "appstatus_app-1.inprogress").rename(rolling / "appstatus_app-1")
    assert eventlog.find(rolling.parent) == rolling and eventlog.read(rolling).total == app.total
    (tmp_path / "unfinished").write_text(lines[0] + "\n")
    with pytest.raises(eventlog.EventLogError, match="no finished application"):
        eventlog.read(tmp_path / "unfinished")


def test_a_small_application_compared_for_two_rounds(tmp_path: Path) -> None:
    app = tmp_path / "my_app.py"
    app.write_text(APP)
    out, result = tmp_path / "runs", tmp_path / "compare.json"
    command = [sys.executable, "-m", "sluice.cli", "compare", "--rounds", "2", "--out", str(out), "--json", str(result)]
    # Without adaptive execution both shuffles run the same jobs (AQE may plan by map output sizes).
    command += ["--", "--master", "local[2]", "--conf", "spark.sql.adaptive.enabled=false", str(app), "200000"]
    done = subprocess.run(command, env=app_env(), capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    text = done.stdout
    assert "sluice compare: my_app.py, 2 rounds of each shuffle, alternating" in text, text
    data: Dict[str, Any] = json.loads(result.read_text())
    jobs = data["comparison"]["jobs"]
    assert len(jobs) >= 2 and text.count("  wall time ") == 1 + len(jobs), text  # the application and each job
    verdict = [line for line in text.splitlines() if line.startswith("verdict: ")]
    assert len(verdict) == 1, text
    runs: List[Dict[str, Any]] = data["runs"]
    assert [(r["round"], r["contender"]) for r in runs] == compare.order(2)
    for run in runs:
        total = run["application"]["total"]
        assert total["wall_s"] > 0 and total["executor_cpu_s"] > 0 and total["shuffle_bytes"] > 0, run
        assert len(run["application"]["jobs"]) == len(jobs), run
        # The runs really used the shuffle they claim: Sluice's runs logged its environment.
        log = Path(run["log"]).read_text(errors="replace")
        assert ("Started Sluice's shuffle environment" in log) == (run["contender"] == "sluice"), run["log"]
    wall = data["comparison"]["total"]["wall_s"]
    assert wall["verdict"] in (compare.NO_DIFFERENCE, "Sluice lower in every run", "Sluice higher in every run")
    expected = (
        f"verdict: {compare.NO_DIFFERENCE} in the application's wall time"
        if wall["verdict"] == compare.NO_DIFFERENCE
        else f"verdict: Sluice took {wall['ratio']:.2f} of the sort shuffle's wall time"
    )
    assert verdict[0].startswith(expected), (verdict, wall)
    assert [j["name"] for j in data["comparison"]["jobs"]] == [j["name"] for j in runs[0]["application"]["jobs"]]


def test_compare_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="put -- before spark-submit's arguments"):
        compare.main(["app.py"], "spark-submit", {})
    with pytest.raises(SystemExit, match="no application after --"):
        compare.main(["--", "--master", "yarn"], "spark-submit", {})
    with pytest.raises(SystemExit, match="use --deploy-mode client"):
        compare.main(["--", "--master", "yarn", "--deploy-mode", "cluster", "app.py"], "spark-submit", {})
    with pytest.raises(SystemExit, match="--rounds must be at least 1"):
        compare.main(["--rounds", "0", "--", "app.py"], "spark-submit", {})
