"""Sluice on YARN, end to end: a MiniYARNCluster (Hadoop's, one ResourceManager and one
NodeManager with room for two executors, in one JVM started from tests/yarn/MiniYarn.java; the
jars come from ``gradle yarnMiniClusterJars``, which ``gradle testJar`` runs) whose NodeManager
runs Sluice's shuffle service as an auxiliary service, configured by the yarn-site.xml lines
docs/node-shuffle-service.md shows (its own class loader over the plugin jar and pyspark's jars), and one
PySpark application submitted to it as a user would:
``spark-submit $(sluice conf --service-enabled true ...) --master yarn`` (client mode), with
spark.authenticate and dynamic allocation without shuffle tracking. The application
(run_yarn.py) does everything once; each test judges one part.

Only this application's processes are observed (its containers' JVMs, by application id). The
cluster, its containers and its work dir are stopped and removed whatever happens.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import processes
import pytest
import reference
from realapps import SPARK_PORT_MAX_RETRIES, free_port, free_port_base
from sessions import REPO, app_env

HERE = Path(__file__).resolve().parent
YARN_LIBS = REPO / "build" / "yarn-libs"
NODE_MANAGER_MB = 4096
WORKLOADS = ["df_group_by", "df_join", "df_window"]
# spark.dynamicAllocation.executorIdleTimeout of the application, in seconds.
IDLE_TIMEOUT_S = 15
# How long after the idle timeout an idle executor may still be there (the goal).
RELEASE_SLACK_S = 10
SERVICE_CLASS = "org.apache.spark.shuffle.sluice.service.SluiceYarnShuffleService"


def _spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _sluice_jar() -> str:
    bin_dir = Path(sys.executable).parent
    return subprocess.run([str(bin_dir / "sluice"), "jar"], capture_output=True, text=True, check=True).stdout.strip()


def service_site(sluice_jar: str, spark_jars: Path, port: int) -> Dict[str, str]:
    """The yarn-site.xml properties that run Sluice's shuffle service in a NodeManager, as
    docs/node-shuffle-service.md shows them: the auxiliary service, its own class path (the NodeManager loads
    it in a class loader of its own, so its Spark and Netty never meet the NodeManager's), and the
    service's settings."""
    return {
        "yarn.nodemanager.aux-services": "sluice_shuffle",
        "yarn.nodemanager.aux-services.sluice_shuffle.class": SERVICE_CLASS,
        "yarn.nodemanager.aux-services.sluice_shuffle.classpath": f"{sluice_jar}:{spark_jars}/*",
        "spark.sluice.service.port": str(port),
        "spark.authenticate": "true",
    }


def site_xml(properties: Dict[str, str]) -> str:
    lines = ['<?xml version="1.0"?>', "<configuration>"]
    lines += [f"  <property><name>{k}</name><value>{v}</value></property>" for k, v in properties.items()]
    return "\n".join([*lines, "</configuration>", ""])


@pytest.fixture(scope="module")
def yarn_cluster() -> Iterator[Dict[str, Any]]:
    """A running MiniYARNCluster whose NodeManager runs Sluice's shuffle service:
    {"conf": HADOOP_CONF_DIR, "work": its NodeManager's dirs, "log": its log, "service_port": ...}."""
    jars = sorted(YARN_LIBS.glob("hadoop-client-minicluster-*.jar"))
    assert jars, f"no MiniYARNCluster jar in {YARN_LIBS}: run `run_gradle testJar` (dev/test does)"
    spark_jars = _spark_jars()
    assert sorted(spark_jars.glob("hadoop-client-*.jar")), f"no hadoop-client jars in {spark_jars}"
    root = Path(tempfile.mkdtemp(prefix="sluice-yarn-"))
    conf, work, log = root / "conf", root / "work", root / "mini-yarn.log"
    work.mkdir()
    service_port = free_port()
    site = root / "sluice-yarn-site.xml"
    site.write_text(site_xml(service_site(_sluice_jar(), spark_jars, service_port)))
    # The NodeManager's own class path has no Sluice: the service comes from its classpath setting only.
    classpath = os.pathsep.join([str(YARN_LIBS / "*"), str(spark_jars / "*")])
    before = processes.descendants()
    log_file = open(log, "w")  # noqa: SIM115 (closed after the cluster stops)
    proc = subprocess.Popen(
        ["java", "-Xmx512m", "-cp", classpath, str(HERE / "yarn" / "MiniYarn.java"), str(conf), "1",
         str(NODE_MANAGER_MB), str(site)],
        cwd=work,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log_file,
        env=app_env(),
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "READY <address>", or "" when it died
        assert line.startswith("READY"), f"the MiniYARNCluster did not start: {log.read_text()[-4000:]}"
        yield {"conf": conf, "work": work, "log": log, "service_port": service_port}
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # MiniYarn stops the cluster (and its containers) and exits
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        processes.kill_started_since(before)  # anything of the cluster's that outlived it
        log_file.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def yarn_app(yarn_cluster: Dict[str, Any]) -> Dict[str, Any]:
    """run_yarn.py submitted to the cluster; its report, the driver's log, the NodeManager's log,
    and what was left after it."""
    base = free_port_base()
    bin_dir = Path(sys.executable).parent  # the console scripts of this venv: sluice, spark-submit
    sluice_conf = subprocess.run(
        [str(bin_dir / "sluice"), "conf", "--sluice-port", str(base), "--service-enabled", "true",
         "--service-port", str(yarn_cluster["service_port"])],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    out = yarn_cluster["work"].parent / "result.json"
    spark_jars = _spark_jars()
    python = sys.executable
    command = [
        str(bin_dir / "spark-submit"), *sluice_conf, "--master", "yarn", "--deploy-mode", "client",
        "--queue", "default",
        # Spark's jars from the pyspark installation every host has, instead of uploading them.
        "--conf", f"spark.yarn.jars=local:{spark_jars}/*",
        # YARN gives the application a secret of its own; the service learns its key from its first executor.
        "--conf", "spark.authenticate=true",
        # Both executors share this host (Spark turns host-local reads off only on local-cluster
        # masters): read through the node service, as from another host.
        "--conf", "spark.shuffle.readHostLocalDisk=false",
        "--conf", "spark.executor.instances=2",
        "--conf", "spark.executor.cores=1",
        "--conf", "spark.executor.memory=512m",
        "--conf", "spark.yarn.am.memory=256m",
        "--conf", "spark.ui.showConsoleProgress=false",
        "--conf", "spark.task.maxFailures=8",
        "--conf", "spark.stage.maxConsecutiveAttempts=8",
        "--conf", "spark.dynamicAllocation.enabled=true",
        # No shuffle tracking: Sluice's storage plugin tells Spark the node service keeps map outputs.
        "--conf", "spark.dynamicAllocation.shuffleTracking.enabled=false",
        "--conf", "spark.dynamicAllocation.minExecutors=0",
        "--conf", "spark.dynamicAllocation.initialExecutors=2",
        "--conf", "spark.dynamicAllocation.maxExecutors=2",
        "--conf", f"spark.dynamicAllocation.executorIdleTimeout={IDLE_TIMEOUT_S}s",
        "--conf", "spark.dynamicAllocation.schedulerBacklogTimeout=1s",
        # Loopback only, and this venv's Python in the containers.
        "--conf", "spark.executorEnv.SPARK_LOCAL_IP=127.0.0.1",
        "--conf", "spark.yarn.appMasterEnv.SPARK_LOCAL_IP=127.0.0.1",
        "--conf", f"spark.executorEnv.PYSPARK_PYTHON={python}",
        "--conf", "spark.executorEnv.JAVA_TOOL_OPTIONS=-XX:TieredStopAtLevel=1",
        str(HERE / "run_yarn.py"), "--out", str(out), "--work", str(yarn_cluster["work"]),
        "--idle-timeout", str(IDLE_TIMEOUT_S),
    ]  # fmt: skip
    env = app_env(HADOOP_CONF_DIR=str(yarn_cluster["conf"]), PYSPARK_PYTHON=python)
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, "\n".join(line for line in proc.stderr.splitlines() if " INFO " not in line)[-6000:]
    result: Dict[str, Any] = json.loads(out.read_text())
    app_id = result["app_id"]

    def left() -> List[str]:
        work = yarn_cluster["work"]
        pattern = f"{work}/**/appcache/{app_id}"
        return (
            glob.glob(pattern, recursive=True)
            + glob.glob(f"{pattern}/**/sluice-shuffle-*.part", recursive=True)
            + glob.glob(f"{work}/**/sluice-{app_id}-*", recursive=True)
        )

    deadline = time.monotonic() + 60  # the NodeManager removes the application's dirs when it ends
    while left() and time.monotonic() < deadline:
        time.sleep(0.5)
    result["left_after"] = left()
    result["stderr"] = proc.stderr
    result["port_base"] = base
    result["node_manager_log"] = yarn_cluster["log"].read_text()
    return result


def _attempts(stages: List[Dict[str, Any]], stage_id: int) -> List[Tuple[int, int]]:
    """(attempt, tasks) of every attempt of stage ``stage_id``."""
    return [(s["attempt"], s["tasks"]) for s in stages if s["stage"] == stage_id]


def _fetch_failures(result: Dict[str, Any]) -> List[str]:
    return [e for s in result["stages"] for e in s["task_errors"] if "FetchFailed" in e]


def test_workloads_exact_on_yarn(yarn_app: Dict[str, Any]) -> None:
    assert yarn_app["sluice_imported"] is False, "Sluice came from `sluice conf`'s arguments only"
    assert reference.mismatches(yarn_app["answers"], "workloads", WORKLOADS) == []


def test_metrics_show_remote_reads_and_servers_in_the_port_range(yarn_app: Dict[str, Any]) -> None:
    # The kept shuffle's map tasks ran on both containers (run_yarn.on_two_containers) ...
    containers = yarn_app["held_containers"]
    assert [c.startswith("container_") for c in containers] == [True, True], containers
    # ... so its reducers read remotely.
    assert yarn_app["remote_bytes"] > 0, "no remote bytes in Sluice's metrics"
    ports, base = yarn_app["server_ports"], yarn_app["port_base"]
    # Two executors on the one NodeManager host, one port base: both bound, within the range.
    assert len(ports) == 2 and ports[0] != ports[1], ports
    assert all(base <= p <= base + SPARK_PORT_MAX_RETRIES for p in ports), (base, ports)


def test_partition_files_live_in_container_dirs_and_go_with_the_application(yarn_app: Dict[str, Any]) -> None:
    files, app_dirs, sluice_dirs = yarn_app["partition_files"], yarn_app["app_dirs"], yarn_app["sluice_dirs"]
    assert app_dirs, "no appcache dir of the application under the NodeManager's local dirs"
    assert files, "no Sluice partition file while a shuffle lived"
    # Each executor's own Sluice dir in the application's dir, which the NodeManager's service reads.
    assert sluice_dirs and all(any(d.startswith(a + os.sep) for a in app_dirs) for d in sluice_dirs), sluice_dirs
    outside = [f for f in files if not any(f.startswith(d + os.sep) for d in sluice_dirs)]
    assert outside == [], f"partition files outside the executors' Sluice dirs: {outside}"
    assert yarn_app["left_after"] == [], f"left after the application: {yarn_app['left_after']}"


def test_the_node_managers_service_served_every_executor_and_forgot_the_application(yarn_app: Dict[str, Any]) -> None:
    app, log = yarn_app["app_id"], yarn_app["node_manager_log"]
    assert "Sluice shuffle service listening on port" in log, log[-3000:]
    # Every executor registered (spark.sluice.service.fallbackToExecutor is off: one that could not would have failed).
    unregistered = [
        e["id"] for e in yarn_app["executors"] if f"Executor {e['id']} of application {app} registered" not in log
    ]
    assert unregistered == [], log[-3000:]
    assert f"Removing application {app}" in log, log[-3000:]


def test_killed_executor_container_costs_no_map_task(yarn_app: Dict[str, Any]) -> None:
    assert yarn_app["killed"], "the reduce stage finished before an executor could be killed"
    assert yarn_app["killed"] in yarn_app["kill_map_executors"], "the killed executor wrote none of the map outputs"
    assert yarn_app["kill_got"] == yarn_app["kill_expected"]
    stages = yarn_app["stages"]
    map_stage, *reduce_stages = yarn_app["kill_stages"]
    # One attempt of the map stage, its 4 tasks each run once: nothing was recomputed ...
    assert _attempts(stages, map_stage) == [(0, 4)], stages
    # ... nor any stage of the job resubmitted, and no reader saw a FetchFailed.
    assert [s for s in stages if s["stage"] in reduce_stages and s["attempt"] > 0] == [], stages
    assert _fetch_failures(yarn_app) == []
    assert "FetchFailed" not in yarn_app["stderr"], yarn_app["stderr"][-3000:]


def test_dynamic_allocation_without_shuffle_tracking_releases_executors_whose_outputs_are_read_later(
    yarn_app: Dict[str, Any],
) -> None:
    # Every executor went once idle, though the kept shuffle's outputs were on them ...
    assert yarn_app["alive_after_idle"] == [], "idle executors were kept"
    held = set(yarn_app["held_executors"])
    assert len(held) == 2, yarn_app["held_executors"]
    history = {e["id"]: e for e in yarn_app["executors"]}
    released = [history[e] for e in held if e != yarn_app["killed"]]
    assert released and all(e["removed"] for e in released), released
    # ... within the idle timeout and RELEASE_SLACK_S of their last task (Spark's own times).
    late = []
    for e in history.values():
        if e["id"] != yarn_app["killed"] and e["removed"]:
            idle_for = (e["removed"] - max(e["added"], e["last_task_end"] or 0)) / 1000
            if idle_for > IDLE_TIMEOUT_S + RELEASE_SLACK_S:
                late.append((e["id"], idle_for, e["reason"]))
    assert late == [], f"released more than {IDLE_TIMEOUT_S}+{RELEASE_SLACK_S}s after their last task: {late}"
    # A later job read the kept shuffle on new executors, exactly, and its map tasks never ran again.
    expected = [[k, 10_000] for k in range(10)]  # run_yarn: 100_000 ids, id % 10
    assert yarn_app["held_first"] == expected and yarn_app["held_again"] == expected, yarn_app["held_again"]
    assert yarn_app["reread_executors"] and not set(yarn_app["reread_executors"]) & held, yarn_app["reread_executors"]
    stages = yarn_app["stages"]
    assert _attempts(stages, yarn_app["held_stages"][0]) == [(0, 4)], stages
    # Spark gives the later job's map stage an id of its own, and skips it: its outputs are all registered.
    reread_maps = [s for s in stages if s["stage"] in yarn_app["reread_stages"][:-1]]
    assert reread_maps and all(s["status"] == "SKIPPED" and s["tasks"] == 0 for s in reread_maps), reread_maps
    assert _fetch_failures(yarn_app) == []
