"""Sluice's node shuffle service on one host (``local-cluster``, the standalone cluster manager):
map outputs outlive the executor that wrote them. An executor SIGKILLed while reducers read its
outputs costs no map task, and the answer is exact; the service says what it served. Only this
test's own service and application are observed."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator

import nodeservice
import pytest
import sessions


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[nodeservice.NodeService]:
    yield from nodeservice.running(tmp_path_factory.mktemp("node-service"))


@pytest.fixture(scope="module")
def killed_run(service: nodeservice.NodeService, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    work = tmp_path_factory.mktemp("node-service-app")
    result, stderr = sessions.run_runner(
        "run_node_service.py", ["--service-port", str(service.port)], work, timeout=900
    )
    result["stderr"] = stderr
    result["work"] = str(work)
    return result


def test_an_executor_killed_mid_reduce_costs_no_map_task(killed_run: Dict[str, Any]) -> None:
    assert killed_run["killed_executor"] is not None, "the reduce stage never ran long enough to kill an executor"
    assert killed_run["answer_ok"], killed_run["answer"]
    stages = killed_run["stages"]
    map_attempts = [s for s in stages if s["stage"] == 0]
    # One attempt of the map stage, its 8 tasks each run once: nothing was recomputed.
    assert [(s["attempt"], s["tasks"]) for s in map_attempts] == [(0, 8)], stages
    fetch_failures = [e for s in stages for e in s["task_errors"] if "FetchFailed" in e]
    assert fetch_failures == [], fetch_failures


def test_the_service_served_both_executors_and_forgets_the_ended_application(
    killed_run: Dict[str, Any], service: nodeservice.NodeService
) -> None:
    app = killed_run["app_id"]
    log = service.log_text()
    for executor in ("0", "1"):
        assert f"Executor {executor} of application {app} registered" in log, log[-3000:]
    status = service.status()
    assert status["bytesSent"] > 0, status
    # The driver's stop removed the application: nothing of it is registered or on disk.
    assert nodeservice.wait_until(lambda: f"Removing application {app}" in service.log_text(), 60), log[-3000:]
    left = [p for p in Path(killed_run["work"]).rglob(f"sluice-{app}-*") if any(p.iterdir())]
    assert left == [], left


def test_a_service_restarted_without_its_registrations_serves_the_outputs_again(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A restart without ``spark.sluice.service.recoveryDir`` forgets every registration; the driver
    notices at its next "alive" and registers its executors' dirs again, so the second job reads the
    first job's map outputs from the restarted service: no map task runs again, no fetch fails."""
    work = tmp_path_factory.mktemp("node-service-restart")
    result, stderr = sessions.run_runner("run_node_service_restart.py", ["--work", str(work)], work, timeout=600)
    assert result["first_ok"] and result["second_ok"], result["second_answer"]
    assert result["registered_again"], result["second_log"]
    stages = result["stages"]
    map_attempts = [(s["attempt"], s["tasks"]) for s in stages if s["stage"] == 0]
    assert map_attempts == [(0, 6)], stages
    fetch_failures = [e for s in stages for e in s["task_errors"] if "FetchFailed" in e]
    assert fetch_failures == [], fetch_failures
    assert "did not know this application" in stderr, stderr[-3000:]
