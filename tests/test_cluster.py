"""Sluice on a real (if small) cluster: Spark standalone across separate network hosts.

The ``cluster`` fixture brings up dev/cluster's test cluster once for this module: a master host,
a driver host and two 1-core worker hosts, each a network namespace with its own address on
10.77.0.0/24, joined through a bridge by links rate-limited to 1 Gbit/s. Every Spark process runs
in its host: the Master and Workers (pyspark's spark-class), the executors the Workers start, and
the driver. Every worker host also runs Sluice's node shuffle service (``sluice shuffle-service``
bound to the host's address), which the dynamic allocation and failure tests' applications use
(spark.sluice.service.enabled); the others leave it idle. The tests need root (network
namespaces); deselect them with ``-m "not cluster"``. Four Spark applications run, one per test
(answers compared with the sort shuffle's, stored by ``reference.py``); on a 2-core machine
shared with other work (load 10-15) the module took 7-10 minutes, and 18 minutes at load 15-20,
most of it JVM start-ups and task scheduling. The decommissioning test runs last: it leaves one
Worker decommissioned.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import realapps
import reference
import sluice
import workloads
from sluice.config import PIPELINED_SHUFFLE_MANAGER, PLUGIN, SHUFFLE_DATA_IO, SHUFFLE_MANAGER

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parent.parent
HERE = REPO / "tests"
TEST_JAR = REPO / "build" / "test-libs" / "sluice-tests.jar"
# The workloads whose answers must equal the sort shuffle's: group-by, join, skew, large records,
# a wide shuffle (60 x 60) and a TPC-H subset (Q3 and Q5 at reference.TPCH_SCALE). (RDD
# shuffles of Python objects run in the dynamic allocation test.)
WORKLOADS = "df_group_by,df_join,key_skew,large_records,many_partitions,tpch_q3,tpch_q5"


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[Any]:
    dev = realapps.dev_cluster()
    # What an earlier run that was killed left behind: clusters whose maker's lock is free.
    dev.clean_stale(unlocked_too=False)
    failed_before = request.session.testsfailed
    c = dev.Cluster(workers=2, rate="1gbit", cores=1, memory="1g", sluice_service=True)
    c.up()
    try:
        yield c
    finally:
        keep = request.session.testsfailed > failed_before
        c.down(keep_logs=keep)
        if keep:
            print(f"\ndev/cluster logs kept in {c.logs}", file=sys.stderr)


def run_in_driver(cluster: Any, argv: List[str], timeout: float) -> subprocess.CompletedProcess[str]:
    done: subprocess.CompletedProcess[str] = cluster.run_on(cluster.driver, argv, timeout=timeout)
    assert done.returncode == 0, f"{argv[:3]} failed in the driver host:\n{done.stderr[-6000:]}"
    return done


def sluice_servers(cluster: Any) -> Dict[str, str]:
    """host name -> "address:port" of the Sluice server of that worker host's executor, from its log."""
    found: Dict[str, str] = {}
    for host in cluster.worker_hosts:
        for log in sorted((cluster.logs / host.name / "work").glob("app-*/*/stderr")):
            m = re.search(r"Started Sluice's shuffle environment on executor \S+: server (\S+):(\d+)", log.read_text())
            if m:
                found[host.name] = f"{m.group(1)}:{m.group(2)}"
    return found


def service_status(cluster: Any, host: Any) -> Dict[str, Any]:
    """The metrics of the worker host's Sluice shuffle service (``sluice shuffle-service --status``,
    asked from the driver host)."""
    sluice_command = str(Path(sys.executable).parent / "sluice")
    done = run_in_driver(
        cluster, [sluice_command, "shuffle-service", "--status", cluster.sluice_service_address(host)], timeout=120
    )
    status: Dict[str, Any] = json.loads(done.stdout)
    return status


def tail(log: Path, chars: int = 6000) -> str:
    return log.read_text(errors="replace")[-chars:]


def sockets(cluster: Any, host: Any, *ss_args: str) -> List[List[str]]:
    """``ss -tn`` in the host, one list of columns per socket (state, queues, local, peer), with
    Java's IPv4-mapped IPv6 addresses ([::ffff:10.77.0.11]:port) written as IPv4 (10.77.0.11:port)."""
    done = cluster.run_on(host, ["ss", "-tnH", *ss_args], timeout=60)
    assert done.returncode == 0, done.stderr
    return [
        [re.sub(r"^\[::ffff:([0-9.]+)\]", r"\1", column) for column in line.split()]
        for line in done.stdout.splitlines()
        if line.strip()
    ]


@pytest.mark.timeout(1800)  # the cluster's start and the job's own deadline of 1200 s
def test_workloads_through_spark_submit_give_the_sort_shuffles_answers(cluster: Any, tmp_path: Path) -> None:
    # The TPC-H tables (every host sees this machine's files).
    tpch = reference.tpch_data(tmp_path / "tpch")

    # The documented spark-submit path: the template with the jar's path filled in, as a user would.
    properties = tmp_path / "sluice.conf"
    template = (REPO / "conf" / "sluice.conf.template").read_text()
    assert "/path/to/sluice.jar" in template
    properties.write_text(template.replace("/path/to/sluice.jar", sluice.jar_path()))
    spark_submit = str(cluster.spark_home / "bin" / "spark-submit")
    out, hold = tmp_path / "sluice.json", tmp_path / "hold"
    job_log = open(tmp_path / "sluice.log", "w")
    job = cluster.popen(
        cluster.driver,
        [
            spark_submit,
            "--master",
            cluster.master_url,
            "--properties-file",
            str(properties),
            "--conf",
            "spark.executor.memory=768m",
            "--conf",
            "spark.ui.showConsoleProgress=false",
            str(HERE / "run_workloads.py"),
            "--shuffle",
            "preconfigured",
            "--out",
            str(out),
            "--workloads",
            WORKLOADS,
            "--tpch-data",
            str(tpch),
            "--hold",
            str(hold),
        ],
        stdout=job_log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 1200
        while not Path(f"{hold}.ready").exists() and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert Path(f"{hold}.ready").exists(), (
            "the cluster job did not finish its workloads"
            + (f": it exited with {job.returncode}" if job.poll() is not None else " in time")
            + tail(tmp_path / "sluice.log")
        )
        # While the application still runs: where Sluice listens, and who is connected to whom.
        servers = sluice_servers(cluster)
        listening = {host.name: sockets(cluster, host, "-l") for host in cluster.worker_hosts}
        established = {
            host.name: [s for s in sockets(cluster, host) if s[0] == "ESTAB"] for host in cluster.worker_hosts
        }
    finally:
        Path(f"{hold}.done").touch()
        try:
            job.wait(timeout=240)
        finally:
            if job.poll() is None:
                job.kill()
            job_log.close()
    assert job.returncode == 0, tail(tmp_path / "sluice.log")

    got = json.loads(out.read_text())
    assert got["shuffle_manager"] == "org.apache.spark.shuffle.sluice.SluiceShuffleManager"
    assert not got["errors"], got["errors"]
    wrong = reference.mismatches(got["answers"], "workloads", WORKLOADS.split(","))
    assert not wrong, wrong
    # The TPC-H answers are not empty (the filters select rows at this scale).
    assert all(got["answers"][name] for name in workloads.TPCH_QUERIES), {
        name: got["answers"][name] for name in workloads.TPCH_QUERIES
    }
    # The data crossed the network through Sluice.
    assert got["counters"].get("numBytesInRemote", 0) > 0, got["counters"]
    assert sorted(got["executors"].values()) == [h.address for h in cluster.worker_hosts], got["executors"]

    # Sluice's server is bound to its host's own address: not loopback, not the wildcard.
    assert sorted(servers) == [h.name for h in cluster.worker_hosts], servers
    for host in cluster.worker_hosts:
        assert servers[host.name].rsplit(":", 1)[0] == host.address, servers
        port = servers[host.name].rsplit(":", 1)[1]
        bound = [s[3] for s in listening[host.name] if s[3].rsplit(":", 1)[1] == port]
        assert bound == [servers[host.name]], (host.name, listening[host.name])
    # One connection per executor pair across hosts, each way: every reader in w1 shares one
    # connection to w2's server, and w2's readers one to w1's.
    for host in cluster.worker_hosts:
        for other in cluster.worker_hosts:
            if other is host:
                continue
            to_other = [s for s in established[host.name] if s[4] == servers[other.name]]
            assert len(to_other) == 1, (host.name, other.name, established[host.name])
            assert to_other[0][3].rsplit(":", 1)[0] == host.address, to_other


def test_dynamic_allocation_without_shuffle_tracking_releases_executors_whose_outputs_are_read_later(
    cluster: Any, tmp_path: Path
) -> None:
    # Submitted as a user would, with `sluice conf --service-enabled true`'s output as
    # spark-submit's arguments through the shell, and the cluster's master on the command line.
    out = tmp_path / "da.json"
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "sluice").is_file(), f"no sluice command beside {sys.executable}"
    env = cluster.host_env(cluster.driver)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    command = (
        '"$SPARK_SUBMIT" $(sluice conf --service-enabled true) --master "$SLUICE_CLUSTER_MASTER" "$APP" --out "$OUT"'
    )
    env.update(
        SPARK_SUBMIT=str(cluster.spark_home / "bin" / "spark-submit"),
        APP=str(HERE / "run_cluster_dynamic_allocation.py"),
        OUT=str(out),
    )
    done = cluster.run_on(cluster.driver, ["bash", "-c", command], timeout=600, env=env)
    assert done.returncode == 0, f"spark-submit $(sluice conf) failed in the driver host:\n{done.stderr[-6000:]}"
    r = json.loads(out.read_text())
    # Sluice came from `sluice conf` alone: its jar, shuffle managers, plugins and the service; the
    # app never imported it.
    assert r["spark.master"] == cluster.master_url, r
    assert [urllib.parse.urlparse(jar).path for jar in r["spark.jars"].split(",")] == [sluice.jar_path()], r
    assert r["spark.shuffle.manager"] == SHUFFLE_MANAGER, r
    assert r["spark.shuffle.manager.incremental"] == PIPELINED_SHUFFLE_MANAGER, r
    assert r["spark.shuffle.sort.io.plugin.class"] == SHUFFLE_DATA_IO, r
    assert r["spark.sluice.service.enabled"] == "true", r
    assert PLUGIN in r["spark.plugins"].split(","), r
    assert r["sluice_imported"] is False, r
    assert r["first"] and r["map_executors"], r
    # Idle, without shuffle tracking: released although the shuffle they wrote is alive.
    assert not set(r["map_executors"]) & set(r["while_shuffle_lives"]), r
    # Their outputs read later by new executors through the hosts' services: the map stage
    # skipped, the reduce stage's 4 tasks done once, the answer exact, no stage attempted again.
    assert r["again"], r
    assert r["again_job"]["status"] == "SUCCEEDED", r["again_job"]
    assert r["again_job"]["numSkippedStages"] == 1 and r["again_job"]["numCompletedTasks"] == 4, r["again_job"]
    assert r["again_job"]["numFailedTasks"] == 0, r["again_job"]
    assert r["again_executors"] and not set(r["again_executors"]) & set(r["map_executors"]), r
    assert all(a["attempt"] == 0 for a in r["attempts"]), r["attempts"]
    # Every executor of the application registered with its host's service.
    registered = [
        line
        for host in cluster.worker_hosts
        for line in (cluster.logs / f"{host.name}-sluice-service.log").read_text(errors="replace").splitlines()
        if f"of application {r['app_id']} registered" in line
    ]
    for executor in {*r["map_executors"], *r["again_executors"]}:
        assert any(f"Executor {executor} of application" in line for line in registered), (executor, registered)


@pytest.mark.timeout(1500)  # the application's own deadline of 1200 s
def test_a_killed_executor_costs_no_map_task_and_a_cut_off_host_is_recomputed(cluster: Any, tmp_path: Path) -> None:
    # Map outputs served by each worker host's Sluice shuffle service (spark.sluice.service.enabled).
    out, marks = tmp_path / "failures.json", tmp_path / "marks"
    marks.mkdir()
    w1, w2 = cluster.worker_hosts[:2]
    sent_before = {host.name: service_status(cluster, host)["bytesSent"] for host in (w1, w2)}
    try:
        run_in_driver(
            cluster,
            [
                sys.executable,
                str(HERE / "run_cluster_failures.py"),
                "--out",
                str(out),
                "--marks",
                str(marks),
                "--kill-ns",
                w1.ns,
                "--kill-reader",
                w2.address,
                "--bridge-ns",
                cluster.bridge.ns,
                "--cut-link",
                w2.link,
                "--cut-reader",
                w1.address,
                "--node-service",
            ],
            timeout=1200,
        )
    finally:
        cluster.reconnect(w2)
    r = json.loads(out.read_text())

    # An executor SIGKILLed while the other host's reducers read its outputs: they read them from
    # its host's service; the map stage ran once, each of its tasks once, and nothing failed to fetch.
    kill = r["phases"]["kill"]
    assert kill["acted"], f"the reduce stage finished before the executor could be killed: {kill}"
    assert kill["got"] == r["expected"]
    map_stage = min(a["stage"] for a in kill["attempts"])
    map_attempts = [a for a in kill["attempts"] if a["stage"] == map_stage]
    assert [(a["attempt"], a["tasks"], a["succeeded"]) for a in map_attempts] == [(0, 8, 8)], kill["attempts"]
    # ... and the killed executor had written some of them, so only its host's service could serve them.
    assert kill["acted"]["executor"] in map_attempts[0]["executors"], (kill["acted"], map_attempts)
    assert not [e for a in kill["attempts"] for e in a["taskErrors"] if "FetchFailed" in e], kill["attempts"]

    # The whole host cut off (executor and service): a FetchFailed that names it, then recomputed.
    cut = r["phases"]["cut"]
    assert cut["acted"], f"the reduce stage finished before the host could be cut off: {cut}"
    assert cut["got"] == r["expected"]
    assert any(a["attempt"] > 0 for a in cut["attempts"]), cut["attempts"]
    named = [
        (m.group(1), after)
        for a in cut["attempts"]
        for e, after in zip(a["taskErrors"], a["taskFailedAfterMs"])
        for m in [re.match(r"FetchFailed\(BlockManagerId\([^,]+, ([0-9.]+),", e)]
        if m
    ]
    assert w2.address in [host for host, _ in named], cut["attempts"]
    # The hung service was noticed by Sluice's heartbeat (6 s here), not after Spark's default two
    # minutes: its first reader failed well within a minute of the cut (a loaded machine may delay
    # the heartbeat's thread, so not within 6 s).
    first = min(after for host, after in named if host == w2.address)
    assert first < 60_000, (first, cut["attempts"])

    # Both services served this application, and forgot it when it ended: nothing is registered.
    for host in (w1, w2):
        status = service_status(cluster, host)
        assert status["bytesSent"] > sent_before[host.name], (host.name, sent_before, status)
        forgot = realapps.wait_for(
            lambda h=host: service_status(cluster, h)["registeredApplications"] == 0, 120, interval=2.0
        )
        assert forgot, (
            host.name,
            service_status(cluster, host),
            tail(cluster.logs / f"{host.name}-sluice-service.log"),
        )
    ended = [
        line
        for host in (w1, w2)
        for line in (cluster.logs / f"{host.name}-sluice-service.log").read_text(errors="replace").splitlines()
        if f"Removing application {r['app_id']}" in line
    ]
    assert len(ended) == 2, ended


# Last in the module: the decommissioned Worker stays decommissioned (no executor starts on its
# host again), so no application after this one could use both worker hosts.
def test_a_decommissioned_worker_host_hands_its_map_outputs_to_the_other_host(cluster: Any, tmp_path: Path) -> None:
    assert TEST_JAR.is_file(), f"{TEST_JAR} is missing: build it with `run_gradle testJar` (dev/test does)"
    out = tmp_path / "decommission.json"
    done = run_in_driver(
        cluster,
        [
            sys.executable,
            str(HERE / "run_cluster_decommission.py"),
            "--out",
            str(out),
            "--test-jar",
            str(TEST_JAR),
            "--master-ui",
            f"http://{cluster.master.address}:8080",
            *[arg for host in cluster.worker_hosts for arg in ("--worker", f"{host.ns}={host.address}")],
        ],
        timeout=900,
    )
    r = json.loads(out.read_text())
    victim, victim_host = r["victim"], r["victimHost"]
    (survivor,) = [h for h in cluster.worker_hosts if h.address != victim_host]
    before = r["before"]
    assert sum(1 for m in before if m["executor"] == victim) >= 1, before
    # The Worker itself was decommissioned (the Master says so), and its executor left.
    assert r["signalled"], r
    assert r["masterWorkers"][victim_host] == "DECOMMISSIONED", r["masterWorkers"]
    assert r["masterWorkers"][survivor.address] == "ALIVE", r["masterWorkers"]
    assert victim not in r["executorsAfter"], r["executorsAfter"]
    assert set(r["executorsAfter"].values()) == {survivor.address}, r["executorsAfter"]
    # Every map output the victim held now lives on the other host's executor, with that
    # executor's Sluice port; the others did not move.
    after = {m["mapId"]: m for m in r["after"]}
    assert len(after) == len(before) and not any(m.get("missing") for m in r["after"]), r["after"]
    ports = {m["executor"]: m["topology"] for m in before}
    moved = 0
    for m in before:
        now = after[m["mapId"]]
        if m["executor"] == victim:
            moved += 1
            assert r["executorsAfter"].get(now["executor"]) == survivor.address, (now, r["executorsAfter"])
            if now["executor"] in ports:
                assert now["topology"] == ports[now["executor"]], (now, ports)
            assert now["topology"], now
        else:
            assert now == m, (now, m)
    # ... and crossed the network to get there: the receiving executor adopted each of them.
    adopted = [
        line
        for log in sorted((cluster.logs / survivor.name / "work").glob("app-*/*/stderr"))
        for line in log.read_text(errors="replace").splitlines()
        if "Adopted migrated map output" in line
    ]
    assert len(adopted) >= moved, adopted
    assert r["got"] == r["expected"]
    # No recompute, no fetch failure: the map stage ran once (the reduce job's copy of it was
    # skipped), and the reduce stage's single attempt had no failed task.
    jobs = {j["id"]: j for j in r["jobs"]}
    stages = {s["id"]: s for s in r["stages"]}
    assert len(jobs) == 2 and all(j["status"] == "SUCCEEDED" for j in jobs.values()), jobs
    map_job, reduce_job = sorted(jobs)
    map_stage, reduce_map_stage, reduce_stage = jobs[map_job]["stageIds"][0], *sorted(jobs[reduce_job]["stageIds"])
    assert stages[map_stage]["completedTasks"] == 6 and stages[map_stage]["attempt"] == 0, stages
    assert stages[reduce_map_stage]["completedTasks"] == 0, f"the map stage ran again: {stages}"
    assert stages[reduce_stage]["attempt"] == 0 and stages[reduce_stage]["failedTasks"] == 0, stages
    assert not [a for a in r["attempts"] if a["attempt"] > 0 or a["task_errors"]], r["attempts"]
    assert "FetchFailed" not in done.stderr, done.stderr[-3000:]
