"""The batch diagnosis of real Spark applications: a skewed reduce partition, a balanced stage, an
executor made slow and starved network memory, each named (or, for the balanced stage, not blamed)
in the Sluice tab, its JSON, Python's tables and, for the first application, the History Server's
replay of its event log. Each application runs in a process of its own
(``tests/run_batch_diagnosis.py``); the History Server is Spark's, Sluice's jar on its class path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
from sessions import REPO, app_env
from test_connect_history import replayed, running_history_server
from test_ui import run_chromium

HERE = Path(__file__).resolve().parent
SCREENSHOT = REPO / "docs" / "sluice-batch-diagnosis.png"
HEALTHY = "No single cause: compute-bound"


def run_app(mode: str, event_log: Path, out: Path, *extra: str) -> Dict[str, Any]:
    command = [sys.executable, str(HERE / "run_batch_diagnosis.py"), "--mode", mode, "--event-log", str(event_log)]
    done = subprocess.run(
        command + ["--out", str(out), *extra], env=app_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"the application failed:\n{done.stderr[-4000:]}"
    result: Dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.fixture(scope="module")
def event_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("batch-event-log")


@pytest.fixture(scope="module")
def jobs(event_log: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    out = tmp_path_factory.mktemp("batch-jobs") / "result.json"
    return run_app("jobs", event_log, out, "--screenshot", str(SCREENSHOT))


@pytest.fixture(scope="module")
def history_server(event_log: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_history_server(event_log, tmp_path_factory.mktemp("batch-history-server")) as url:
        yield url


def reduce_stage(result: Dict[str, Any], group: str, table: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The row of ``group``'s last stage (the one that reads the shuffle) in a stage table."""
    last = max(result["groups"][group]["stages"])
    rows = [s for s in table if s["stage_id"] == last]
    assert len(rows) == 1, f"stage {last} of {group} is not in {[s['stage_id'] for s in table]}"
    return rows[0]


def json_cause(tab: Dict[str, Any], result: Dict[str, Any], group: str) -> Dict[str, Any]:
    """The figures of ``group``'s reduce stage's batch diagnosis in the tab's JSON, with its ``cause``."""
    stage = reduce_stage(result, group, tab["stages"])
    batch: Dict[str, Any] = stage["batch"]
    assert batch is not None, f"{group}'s reduce stage has no batch diagnosis"
    return {**batch, "cause": stage["cause"]}


def batch_row_html(html: str, stage: int) -> str:
    start = html.index(f'<tr class="sluice-batch-stage" data-stage-id="{stage}"')
    return html[start : html.index("</tr>", start)]


def check_causes(result: Dict[str, Any], tab: Dict[str, Any]) -> None:
    """Each group's reduce stage named as it should be, in the tab's JSON ``tab``."""
    hot = result["hot_partition"]
    assert len(hot) == 1
    skew = json_cause(tab, result, "skew")
    assert skew["cause"].startswith(f"Skew: reduce partition {hot[0]} read"), skew
    assert skew["max_partition_id"] == hot[0] and skew["max_partition_bytes"] >= 4 * skew["median_partition_bytes"]
    balanced = json_cause(tab, result, "balanced")
    assert balanced["cause"].startswith(HEALTHY), balanced
    assert balanced["max_partition_bytes"] < 2 * balanced["median_partition_bytes"]
    slow = json_cause(tab, result, "slow")
    assert slow["cause"].startswith("A slow executor: tasks on executor 1 "), slow
    assert slow["slow_executor"] == "1" and slow["slow_executor_ratio"] >= 3.0


def test_the_tab_json_and_python_name_each_cause(jobs: Dict[str, Any]) -> None:
    check_causes(jobs, jobs["json"])
    # The tab's page: the batch table, its cause cell, and the stage table's diagnosis column.
    html = jobs["html"]
    assert 'id="sluice-batch"' in html
    skew_stage = reduce_stage(jobs, "skew", jobs["json"]["stages"])["stage_id"]
    assert f"Skew: reduce partition {jobs['hot_partition'][0]}" in batch_row_html(html, skew_stage)
    slow_stage = reduce_stage(jobs, "slow", jobs["json"]["stages"])["stage_id"]
    assert "executor 1 (" in batch_row_html(html, slow_stage)
    balanced_stage = reduce_stage(jobs, "balanced", jobs["json"]["stages"])["stage_id"]
    assert HEALTHY in batch_row_html(html, balanced_stage)
    # Pipelined-only backpressure reasoning is not applied to batch stages.
    assert all(s["batch"] is not None for s in jobs["json"]["stages"])
    assert "network bottleneck" not in html
    # The same in Python's stage table, with its job and stage columns.
    stages = jobs["stages"]
    skew = reduce_stage(jobs, "skew", stages)
    assert skew["batch"] and skew["cause"].startswith("Skew: ") and skew["skew_ratio"] >= 4.0
    assert skew["job_group"] == "skew" and skew["job_ids"] and skew["job_ids"][0] in jobs["groups"]["skew"]["jobs"]
    assert skew["sql_execution_id"] is not None and skew["stage_name"]
    assert reduce_stage(jobs, "balanced", stages)["cause"].startswith(HEALTHY)
    assert reduce_stage(jobs, "slow", stages)["slow_executor"] == "1"
    assert reduce_stage(jobs, "slow", stages)["sql_execution_id"] is None  # an RDD job
    # One job's stages.
    of_job = jobs["stages_of_job"]
    assert of_job["stages"] and all(of_job["job"] in s["job_ids"] for s in of_job["stages"])
    assert {s["stage_id"] for s in of_job["stages"]} < {s["stage_id"] for s in stages}


def test_python_tables_carry_every_field(jobs: Dict[str, Any]) -> None:
    rows = jobs["metrics"]
    assert rows and all(r["running"] is False and r["started_at_ms"] > 0 for r in rows)
    skew_reduce = max(jobs["groups"]["skew"]["stages"])
    reducers = [r for r in rows if r["stage_id"] == skew_reduce]
    assert sorted(r["partition_id"] for r in reducers) == list(range(8))
    assert all(r["job_group"] == "skew" and r["stage_name"] for r in reducers)
    # Every reduce task read from both executors, its waits for input by producing executor.
    assert all(set(dict(r["input_wait_by_producer_ms"])) <= {"0", "1"} for r in reducers)
    assert sum(r["numRecordsIn"] for r in reducers) == 1_000_000
    assert {e["executor_id"] for e in jobs["executors"]} == {"0", "1"}
    assert all(e["TotalMemorySegments"] > 0 and e["server_port"] > 0 for e in jobs["executors"])


def test_the_screenshot_shows_the_batch_diagnosis(jobs: Dict[str, Any]) -> None:
    dom = jobs["dom"]
    assert 'id="sluice-batch"' in dom and "Batch stages: where the time went" in dom
    assert "Skew: reduce partition" in dom
    assert Path(jobs["screenshot"]).is_file()


def test_the_history_server_replays_the_diagnosis(jobs: Dict[str, Any], history_server: str) -> None:
    tab = replayed(history_server, jobs["app_id"], completed=True)
    assert tab["replayed"] is True
    check_causes(jobs, tab)
    live = {s["stage_id"]: s["cause"] for s in jobs["json"]["stages"]}
    assert {s["stage_id"]: s["cause"] for s in tab["stages"]} == live
    dom = run_chromium(["--dump-dom", f"{history_server}/history/{jobs['app_id']}/sluice/"])
    assert 'id="sluice-batch"' in dom and f"Skew: reduce partition {jobs['hot_partition'][0]}" in dom
    # The application's one-line summary, kept from its event log.
    assert tab["summary"]["line"].startswith("Sluice summary: ") and tab["summary"]["slowest_stage_id"] is not None
    assert 'id="sluice-summary"' in dom


def test_starved_network_memory_names_the_waits_for_buffers(tmp_path: Path) -> None:
    result = run_app("starved", tmp_path, tmp_path / "result.json")
    batch = json_cause(result["json"], result, "starved")
    assert batch["cause"].startswith("Waits for network buffers: "), batch
    assert batch["buffer_wait_ms"] >= 0.1 * batch["executor_run_time_ms"]
    row = reduce_stage(result, "starved", result["stages"])
    assert row["cause"] == batch["cause"] and row["buffer_wait_ms"] == batch["buffer_wait_ms"]
    assert "Waits for network buffers" in batch_row_html(result["html"], row["stage_id"])
    waited = [r for r in result["metrics"] if r["stage_id"] == row["stage_id"] and r["buffer_wait_ms"] > 0]
    assert waited, "no reduce task reports a wait for network buffers"
