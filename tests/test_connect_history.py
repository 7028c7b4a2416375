"""Sluice where PySpark users are: behind a Spark Connect server, and in Spark's History Server.

Real processes on loopback, each with its own ports and directories, and each killed with its
process group at the end: a Connect server started with ``sluice connect-server`` on
``local-cluster[2,1,1024]`` and an event log; Connect clients in processes of their own (one as a
``pyspark-client`` install would be, without PySpark's classic core or py4j); a History Server
(``org.apache.spark.deploy.history.HistoryServer`` of the pyspark wheel, Sluice's jar on
``SPARK_DAEMON_CLASSPATH``) that replays the Connect server's log once it stopped, and the log of
an application killed before it could write its end.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pyspark
import pytest
import sluice
from pyspark.sql import SparkSession
from sessions import APP_MASTER, REPO, app_env, http_json
from test_ui import run_chromium, screenshot

HERE = Path(__file__).resolve().parent
SLUICE_CLI = Path(sys.executable).parent / "sluice"
SPARK_CLASS = Path(pyspark.__file__).resolve().parent / "bin" / "spark-class"
SCREENSHOT = REPO / "docs" / "sluice-history-tab.png"
# What the live tab and the replayed one must agree on, per stage.
FIGURES = ("numRecordsOut", "numRecordsIn", "numBytesOut", "numBytesIn")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """A process started in a process group of its own, its output in a log file; ``stop`` ends
    the whole group (the JVM and what it started, such as local-cluster's executors)."""

    def __init__(self, name: str, command: List[str], env: Dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.process.returncode}; its log ends:\n{self.log_tail()}")

    def stop(self, graceful: bool) -> None:
        """``graceful``: SIGTERM to the JVM first (Spark's shutdown hook stops the SparkContext,
        which posts the application's end), then SIGKILL to whatever of the group is left."""
        if graceful and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)


def wait_for(what: str, daemon: Daemon, probe: Callable[[], Optional[Any]], timeout: float = 180.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        daemon.check_alive()
        try:
            value = probe()
        except (OSError, urllib.error.URLError, ValueError):
            value = None
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what}: not after {timeout:.0f} s; {daemon.name}'s log ends:\n{daemon.log_tail()}")


@dataclass
class ConnectServer:
    daemon: Daemon
    url: str
    ui: str
    app_id: str


@pytest.fixture(scope="module")
def event_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("event-log")


@pytest.fixture(scope="module")
def connect_server(event_log: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    port, ui_port = free_port(), free_port()
    command = [str(SLUICE_CLI), "connect-server", "--connect-port", str(port), "--metrics-report-interval", "200ms"]
    command += ["--master", APP_MASTER]
    for setting in (
        f"spark.ui.port={ui_port}",
        "spark.port.maxRetries=0",  # this port or none: never another application's UI
        "spark.eventLog.enabled=true",
        f"spark.eventLog.dir=file://{event_log}",
        "spark.eventLog.compress=false",  # so that the test can count the bytes Sluice adds to it
        "spark.sql.shuffle.partitions=4",
        "spark.ui.showConsoleProgress=false",
    ):
        command += ["--conf", setting]
    log = tmp_path_factory.mktemp("connect-server") / "server.log"
    daemon = Daemon("the Connect server", command, app_env(), log)
    try:

        def serving() -> Optional[str]:
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                pass
            apps = http_json(f"http://127.0.0.1:{ui_port}/api/v1/applications", timeout=10)
            return str(apps[0]["id"]) if apps and apps[0]["name"] == "Spark Connect server" else None

        app_id = wait_for("the Connect server serves gRPC and its UI", daemon, serving)
        yield ConnectServer(daemon, f"sc://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}", app_id)
    finally:
        daemon.stop(graceful=False)


def run_client(server: ConnectServer, out: Path, *extra: str) -> Dict[str, Any]:
    command = [sys.executable, str(HERE / "run_connect_client.py"), "--url", server.url, "--out", str(out), *extra]
    done = subprocess.run(command, env=app_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"the Connect client failed:\n{done.stderr[-4000:]}"
    result: Dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.fixture(scope="module")
def client_result(connect_server: ConnectServer, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    """One client's shuffle query, and what the live tab and Spark's REST API showed afterwards
    (the client's sluice.metrics waited until the executors reported everything)."""
    result = run_client(connect_server, tmp_path_factory.mktemp("client") / "result.json")
    result["live"] = http_json(f"{connect_server.ui}/sluice/json")
    result["spark_stages"] = http_json(f"{connect_server.ui}/api/v1/applications/{connect_server.app_id}/stages")
    return result


def per_stage(tab: Dict[str, Any]) -> Dict[int, Tuple[int, ...]]:
    return {int(s["stage_id"]): tuple(int(s[f]) for f in FIGURES) for s in tab["stages"]}


def test_connect_server_command_line() -> None:
    from sluice.cli import CONNECT_SERVER_CLASS, connect_server_command

    args = ["--master", "local-cluster[2,1,1024]", "--buffer-timeout", "10ms", "--conf", "spark.ui.port=4050"]
    command = connect_server_command("spark-submit", args + ["--connect-port", "15010"], {})
    joined = " ".join(command)
    assert command[:2] == ["spark-submit", "--jars"] and command[-1] == "spark-internal"
    assert f"--class {CONNECT_SERVER_CLASS}" in joined
    assert "spark.sluice.bufferTimeout=10ms" in joined and "spark.plugins=" in joined
    assert "spark.connect.grpc.binding.port=15010" in joined
    assert "spark.connect.grpc.binding.address=127.0.0.1" in joined  # a local master stays on loopback
    assert "--master local-cluster[2,1,1024] --conf spark.ui.port=4050" in joined
    cluster = " ".join(connect_server_command("spark-submit", ["--master", "spark://m:7077"], {}))
    assert "binding.address" not in cluster and "spark.connect.grpc.binding.port=15002" in cluster
    with pytest.raises(SystemExit, match="buffer_timeout"):
        connect_server_command("spark-submit", ["--buffer-timeout", "soon"], {})
    with pytest.raises(SystemExit, match="remove app.py"):
        connect_server_command("spark-submit", ["app.py"], {})


@pytest.mark.usefixtures("without_spark_context")
def test_configure_refuses_a_remote_builder(monkeypatch: pytest.MonkeyPatch) -> None:
    builder = SparkSession.builder.remote("sc://127.0.0.1:15002")
    with pytest.raises(RuntimeError, match="command line") as refused:
        sluice.configure(builder, buffer_timeout="10ms")
    message = str(refused.value)
    assert "spark.remote=sc://127.0.0.1:15002" in message and "sluice connect-server" in message
    assert "SPARK-44981" in message
    assert "spark.plugins" not in builder._options and "spark.jars" not in builder._options
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:15003")
    with pytest.raises(RuntimeError, match="spark.remote=sc://127.0.0.1:15003"):
        sluice.configure(SparkSession.builder)
    monkeypatch.delenv("SPARK_REMOTE")
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    with pytest.raises(RuntimeError, match="pyspark.sql.connect.session"):
        sluice.configure(ConnectSession.builder)


def test_a_connect_client_runs_its_shuffle_on_sluice(client_result: Dict[str, Any]) -> None:
    result = client_result
    assert result["session_class"] == "pyspark.sql.connect.session.SparkSession"
    assert result["answer"] == result["expected"]
    # Sluice carried the shuffle: its record counts are Spark's own shuffle records.
    spark_written = sum(s["shuffleWriteRecords"] for s in result["spark_stages"])
    spark_read = sum(s["shuffleReadRecords"] for s in result["spark_stages"])
    assert spark_written > 0 and result["records_out"] == spark_written
    assert result["records_in"] == spark_read == spark_written
    assert result["metrics_rows"] > 0 and "outPoolUsage" in result["metrics_columns"]
    assert result["backpressure"] and all(
        row["backpressure_level"] in ("OK", "LOW", "HIGH") for row in result["backpressure"]
    )
    assert {row["stage_id"] for row in result["backpressure"]} == set(per_stage(result["live"]))


def test_a_client_without_classic_pyspark_reads_the_metrics(
    connect_server: ConnectServer, client_result: Dict[str, Any], tmp_path: Path
) -> None:
    """As with ``pip install pyspark-client``: no pyspark.core, no py4j, no JVM on the client."""
    result = run_client(connect_server, tmp_path / "result.json", "--connect-only")
    assert result["remote_only"] is True and result["modules_loaded"] == []
    assert result["metrics_rows"] == client_result["metrics_rows"]
    assert result["records_out"] == client_result["records_out"]
    assert len(result["backpressure"]) == len(client_result["backpressure"])


@contextlib.contextmanager
def running_history_server(event_log: Path, work: Path) -> Iterator[str]:
    """Spark's History Server over ``event_log`` with Sluice's jar on its classpath, its log in
    ``work``; yields its URL once it answers and stops it afterwards."""
    port = free_port()
    opts = [
        f"-Dspark.history.fs.logDirectory=file://{event_log}",
        f"-Dspark.history.ui.port={port}",
        "-Dspark.port.maxRetries=0",
        "-Dspark.history.fs.update.interval=1s",
    ]
    env = app_env(SPARK_DAEMON_CLASSPATH=sluice.jar_path(), SPARK_HISTORY_OPTS=" ".join(opts))
    daemon = Daemon(
        "the History Server",
        [str(SPARK_CLASS), "org.apache.spark.deploy.history.HistoryServer"],
        env,
        work / "history.log",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            "the History Server answers", daemon, lambda: isinstance(http_json(f"{url}/api/v1/applications"), list)
        )
        yield url
    finally:
        daemon.stop(graceful=False)


@pytest.fixture(scope="module")
def history_server(event_log: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_history_server(event_log, tmp_path_factory.mktemp("history-server")) as url:
        yield url


def replayed(history: str, app_id: str, completed: bool) -> Dict[str, Any]:
    """The replayed tab's JSON of ``app_id`` once the History Server lists it (as completed, or not)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        apps = http_json(f"{history}/api/v1/applications?status={'completed' if completed else 'running'}")
        if any(app["id"] == app_id for app in apps):
            tab: Dict[str, Any] = http_json(f"{history}/history/{app_id}/sluice/json")
            return tab
        time.sleep(0.5)
    raise AssertionError(f"the History Server did not list {app_id} (completed={completed}) within 120 s")


def sluice_event_bytes(event_log: Path, app_id: str) -> Tuple[int, int, Dict[str, int], int]:
    """Bytes and number of Sluice's events in ``app_id``'s event log, the count per event class,
    and the bytes of the whole log."""
    files = sorted(event_log.glob(f"*{app_id}*/events_*")) or sorted(event_log.glob(f"{app_id}*"))
    assert files, f"no event log of {app_id} in {event_log}: {os.listdir(event_log)}"
    size, count, total = 0, 0, 0
    kinds: Dict[str, int] = {}
    for path in files:
        total += path.stat().st_size
        for line in path.read_bytes().splitlines():
            if b'"Event":"org.apache.spark.shuffle.sluice.' in line:
                kind = json.loads(line)["Event"].rsplit(".", 1)[1]
                kinds[kind] = kinds.get(kind, 0) + 1
                size += len(line) + 1
                count += 1
    return size, count, kinds, total


def test_the_history_server_replays_the_tab(
    connect_server: ConnectServer, client_result: Dict[str, Any], history_server: str, event_log: Path
) -> None:
    live = client_result["live"]
    assert live["stages"], "the live tab shows no stage"
    connect_server.daemon.stop(graceful=True)  # the application ends: its log gets the end event
    tab = replayed(history_server, connect_server.app_id, completed=True)
    assert tab["replayed"] is True
    assert per_stage(tab) == per_stage(live)
    assert {e["executor_id"] for e in tab["executors"]} == {e["executor_id"] for e in live["executors"]}
    assert all(e["TotalMemorySegments"] > 0 for e in tab["executors"])

    size, count, kinds, total = sluice_event_bytes(event_log, connect_server.app_id)
    stages = len(live["stages"])
    print(
        f"\nSluice's events in the event log: {size} bytes in {count} events ({kinds}) for {stages} stages, "
        f"{size / stages:.0f} bytes per stage; the whole log {total} bytes"
    )
    assert kinds.get("SparkListenerSluiceSettings") == 1
    assert kinds.get("SparkListenerSluiceStageMetrics", 0) <= 4 * stages
    assert size / stages < 8192, f"{size / stages:.0f} bytes per stage"

    url = f"{history_server}/history/{connect_server.app_id}/sluice/"
    dom = run_chromium(["--dump-dom", url])
    assert 'id="sluice-stages"' in dom and 'id="sluice-executors"' in dom and 'id="sluice-replayed"' in dom
    for stage in per_stage(live):
        assert f'data-stage-id="{stage}"' in dom
    assert ">Sluice<" in dom  # the tab in the History Server's navigation bar
    screenshot(url, SCREENSHOT)


def test_a_killed_application_still_replays(history_server: str, event_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    command = [sys.executable, str(HERE / "run_history_app.py"), "--event-log", str(event_log), "--out", str(out)]
    daemon = Daemon("the application to kill", command, app_env(), tmp_path / "app.log")
    try:
        wait_for("the application ran its job", daemon, lambda: out.is_file() and out.stat().st_size > 0)
        result = json.loads(out.read_text())
    finally:
        daemon.stop(graceful=False)  # SIGKILL: no application end in its log
    assert daemon.process.returncode == -signal.SIGKILL
    live = result["live"]
    assert live["stages"] and all(s["numRecordsOut"] + s["numRecordsIn"] > 0 for s in live["stages"])
    tab = replayed(history_server, result["app_id"], completed=False)
    assert per_stage(tab) == per_stage(live)
