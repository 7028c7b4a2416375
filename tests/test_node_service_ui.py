"""What the Sluice tab and ``/sluice/json`` show of Sluice's node shuffle service, on a real
application whose map outputs one serves (``local-cluster``, the service started as a user starts
it): the service's own figures from its status and which executors' outputs it serves. Only this
test's own service and application are observed."""

from __future__ import annotations

from typing import Any, Dict, Iterator

import nodeservice
import pytest
import sessions

MAPS = 6  # run_node_service_ui.py's map tasks


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[nodeservice.NodeService]:
    yield from nodeservice.running(tmp_path_factory.mktemp("node-service-ui"))


@pytest.fixture(scope="module")
def ui_run(service: nodeservice.NodeService, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    work = tmp_path_factory.mktemp("node-service-ui-app")
    result, _ = sessions.run_runner("run_node_service_ui.py", ["--service-port", str(service.port)], work, timeout=900)
    return result


def test_the_json_shows_the_service_its_figures_and_whom_it_serves(
    ui_run: Dict[str, Any], service: nodeservice.NodeService
) -> None:
    assert ui_run["answer_ok"]
    block = ui_run["node_services"]
    (s,) = block["services"]
    assert (s["host"], s["port"]) == ("127.0.0.1", service.port), s
    assert s["status_at_ms"] > 0, s
    # This application alone registered with this test's service, with both of its executors.
    assert s["registered_applications"] == 1 and s["registered_executors"] == 2, s
    assert sorted(s["application_executors"]) == ui_run["executors"] == ["0", "1"], (s, ui_run["executors"])
    assert s["bytes_sent"] > 0, s
    # The one shuffle's MAPS map outputs, written by both executors, are all the service's.
    (shuffle,) = s["shuffles"]
    assert s["map_outputs"] == shuffle["map_outputs"] == MAPS, s
    assert s["disk_files"] > 0 and s["disk_bytes"] >= s["application_disk_bytes"] > 0, s
    for key in ("connections", "readers", "queued_reads", "application_disk_files"):
        assert isinstance(s[key], int) and s[key] >= 0, (key, s)
    assert block["executors"] == [
        {"executor_id": e, "host": "127.0.0.1", "port": service.port, "live": True} for e in ui_run["executors"]
    ], block["executors"]
    # The service's own view agrees: it served bytes and held this application's files while it ran.
    assert service.status()["bytesSent"] >= s["bytes_sent"]


def test_the_tab_renders_the_services_table(ui_run: Dict[str, Any], service: nodeservice.NodeService) -> None:
    assert ui_run["page_has_table"]
    ((where, executors, map_outputs),) = ui_run["page_rows"]
    assert (where, executors) == (f"127.0.0.1:{service.port}", "0,1"), ui_run["page_rows"]
    assert map_outputs == f"{ui_run['node_services']['services'][0]['shuffles'][0]['shuffle_id']}:{MAPS}", map_outputs
