"""Sluice on YARN, end to end: a MiniYARNCluster (Hadoop's, one ResourceManager and one
NodeManager with room for two executors, in one JVM started from tests/yarn/MiniYarn.java; the
jars come from ``gradle yarnMiniClusterJars``, which ``gradle testJar`` runs) and one PySpark
application submitted to it as a user would: ``spark-submit $(sluice conf) --master yarn``
(client mode). The application (run_yarn.py) does everything once; each test judges one part.

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
from typing import Any, Dict, Iterator, List

import processes
import pytest
import reference
from realapps import SPARK_PORT_MAX_RETRIES, free_port_base
from sessions import REPO, app_env

HERE = Path(__file__).resolve().parent
YARN_LIBS = REPO / "build" / "yarn-libs"
NODE_MANAGER_MB = 4096
WORKLOADS = ["df_group_by", "df_join", "df_window"]


def _spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


@pytest.fixture(scope="module")
def yarn_cluster() -> Iterator[Dict[str, Path]]:
    """A running MiniYARNCluster: {"conf": HADOOP_CONF_DIR, "work": its NodeManager's dirs}."""
    jars = sorted(YARN_LIBS.glob("hadoop-client-minicluster-*.jar"))
    assert jars, f"no MiniYARNCluster jar in {YARN_LIBS}: run `run_gradle testJar` (dev/test does)"
    spark_jars = _spark_jars()
    assert sorted(spark_jars.glob("hadoop-client-*.jar")), f"no hadoop-client jars in {spark_jars}"
    root = Path(tempfile.mkdtemp(prefix="sluice-yarn-"))
    conf, work, log = root / "conf", root / "work", root / "mini-yarn.log"
    work.mkdir()
    classpath = os.pathsep.join([str(YARN_LIBS / "*"), str(spark_jars / "*")])
    before = processes.descendants()
    log_file = open(log, "w")  # noqa: SIM115 (closed after the cluster stops)
    proc = subprocess.Popen(
        ["java", "-Xmx512m", "-cp", classpath, str(HERE / "yarn" / "MiniYarn.java"), str(conf), "1",
         str(NODE_MANAGER_MB)],
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
        yield {"conf": conf, "work": work}
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
def yarn_app(yarn_cluster: Dict[str, Path]) -> Dict[str, Any]:
    """run_yarn.py submitted to the cluster; its report, the driver's log, and what was left after it."""
    base = free_port_base()
    bin_dir = Path(sys.executable).parent  # the console scripts of this venv: sluice, spark-submit
    sluice_conf = subprocess.run(
        [str(bin_dir / "sluice"), "conf", "--sluice-port", str(base)], capture_output=True, text=True, check=True
    ).stdout.split()
    out = yarn_cluster["work"].parent / "result.json"
    spark_jars = _spark_jars()
    python = sys.executable
    command = [
        str(bin_dir / "spark-submit"), *sluice_conf, "--master", "yarn", "--deploy-mode", "client",
        "--queue", "default",
        # Spark's jars from the pyspark installation every host has, instead of uploading them.
        "--conf", f"spark.yarn.jars=local:{spark_jars}/*",
        "--conf", "spark.executor.instances=2",
        "--conf", "spark.executor.cores=1",
        "--conf", "spark.executor.memory=512m",
        "--conf", "spark.yarn.am.memory=256m",
        "--conf", "spark.ui.showConsoleProgress=false",
        "--conf", "spark.task.maxFailures=8",
        "--conf", "spark.stage.maxConsecutiveAttempts=8",
        "--conf", "spark.dynamicAllocation.enabled=true",
        "--conf", "spark.dynamicAllocation.shuffleTracking.enabled=true",
        "--conf", "spark.dynamicAllocation.minExecutors=0",
        "--conf", "spark.dynamicAllocation.initialExecutors=2",
        "--conf", "spark.dynamicAllocation.maxExecutors=2",
        "--conf", "spark.dynamicAllocation.executorIdleTimeout=3s",
        "--conf", "spark.dynamicAllocation.schedulerBacklogTimeout=1s",
        # Loopback only, and this venv's Python in the containers.
        "--conf", "spark.executorEnv.SPARK_LOCAL_IP=127.0.0.1",
        "--conf", "spark.yarn.appMasterEnv.SPARK_LOCAL_IP=127.0.0.1",
        "--conf", f"spark.executorEnv.PYSPARK_PYTHON={python}",
        "--conf", "spark.executorEnv.JAVA_TOOL_OPTIONS=-XX:TieredStopAtLevel=1",
        str(HERE / "run_yarn.py"), "--out", str(out), "--work", str(yarn_cluster["work"]),
    ]  # fmt: skip
    env = app_env(HADOOP_CONF_DIR=str(yarn_cluster["conf"]), PYSPARK_PYTHON=python)
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-6000:]
    result: Dict[str, Any] = json.loads(out.read_text())
    app_id = result["app_id"]

    def left() -> List[str]:
        pattern = f"{yarn_cluster['work']}/**/appcache/{app_id}"
        return glob.glob(pattern, recursive=True) + glob.glob(f"{pattern}/**/sluice-shuffle-*.part", recursive=True)

    deadline = time.monotonic() + 60  # the NodeManager removes the application's dirs when it ends
    while left() and time.monotonic() < deadline:
        time.sleep(0.5)
    result["left_after"] = left()
    result["stderr"] = proc.stderr
    result["port_base"] = base
    return result


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
    files, app_dirs = yarn_app["partition_files"], yarn_app["app_dirs"]
    assert app_dirs, "no appcache dir of the application under the NodeManager's local dirs"
    assert files, "no Sluice partition file while a shuffle lived"
    outside = [f for f in files if not any(f.startswith(d + os.sep) for d in app_dirs)]
    assert outside == [], f"partition files outside the containers' local dirs: {outside}"
    assert yarn_app["left_after"] == [], f"left after the application: {yarn_app['left_after']}"


def test_killed_executor_container_recovered_exactly(yarn_app: Dict[str, Any]) -> None:
    assert yarn_app["killed"], "the reduce stage finished before an executor could be killed"
    assert yarn_app["kill_got"] == yarn_app["kill_expected"]
    assert "FetchFailed" in yarn_app["stderr"], yarn_app["stderr"][-3000:]


def test_dynamic_allocation_releases_idle_executors(yarn_app: Dict[str, Any]) -> None:
    assert yarn_app["while_shuffle_lives"], "executors holding live shuffle outputs were released"
    assert yarn_app["after_release"] == [], "idle executors were kept after their shuffles were dropped"
