"""Regular (blocking) shuffles through Sluice give exactly the sort shuffle's answers.

Every workload of ``workloads.py`` runs once on Spark's sort shuffle (the reference) and then on
Sluice in several configurations, each a separate Spark application on a two-executor
local-cluster (one Python process can start Spark's driver JVM only once). Besides the answers,
each run proves Sluice carried the data: no sort-shuffle ``shuffle_*.data`` file appears in the
local dirs, Sluice's partition files do, and Sluice's own counters moved.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional

import pytest
import workloads
from sessions import APP_MASTER, app_env

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "run_workloads.py")


def run_app(
    shuffle: str,
    options: Dict[str, str],
    via_submit: bool = False,
    names: List[str] = list(workloads.WORKLOADS),  # noqa: B006 (never mutated)
    conf: Optional[Dict[str, str]] = None,
    marker: Optional[str] = None,
    probe_secret: Optional[str] = None,
    master: str = APP_MASTER,
) -> Dict[str, Any]:
    """Runs the workloads in a fresh Spark application (on ``master``) and returns the runner's report."""
    work = tempfile.mkdtemp(prefix=f"sluice-{shuffle}-")
    local_dirs = os.path.join(work, "local")
    os.makedirs(local_dirs)
    out = os.path.join(work, "answers.json")
    env = app_env(SPARK_LOCAL_DIRS=local_dirs, SLUICE_TEST_MASTER=master)
    args = ["--out", out, "--workloads", ",".join(names)] + (["--marker", marker] if marker else [])
    if via_submit:
        import pyspark
        from sluice.config import spark_conf

        conf_file = os.path.join(work, "sluice.conf")
        with open(conf_file, "w") as f:
            settings = dict(spark_conf(**options), **{"spark.master": master})
            for key, value in settings.items():
                f.write(f"{key} {value}\n")
        submit = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")
        cmd = [submit, "--properties-file", conf_file, RUNNER, "--shuffle", "preconfigured"] + args
        env["PYSPARK_PYTHON"] = sys.executable
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    else:
        cmd = [sys.executable, RUNNER, "--shuffle", shuffle] + args
        cmd += [f"--option={k}={v}" for k, v in options.items()]
        cmd += [f"--conf={k}={v}" for k, v in (conf or {}).items()]
        if probe_secret is not None:
            cmd += [f"--probe-secret={probe_secret}"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0 or not os.path.exists(out):
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
    with open(out) as f:
        report: Dict[str, Any] = json.load(f)
    return report


@pytest.fixture(scope="module")
def reference() -> Dict[str, Any]:
    # The sort shuffle's answers in one JVM (local[2]): the same answers, without two executors to start.
    report = run_app("sort", {}, names=list(workloads.WORKLOADS) + ["marked_records"], master="local[2]")
    assert not report["errors"], report["errors"]
    assert report["files"]["sort"], "the sort shuffle should have written shuffle_*.data files"
    return report["answers"]


def check_sluice_report(report: Dict[str, Any], reference: Dict[str, Any]) -> None:
    assert not report["errors"], "\n".join(f"{k}:\n{v}" for k, v in report["errors"].items())
    assert report["shuffle_manager"].endswith("SluiceShuffleManager")
    assert set(report["answers"]) == set(reference), sorted(report["answers"])
    for name, expected in reference.items():
        got = report["answers"].get(name)
        assert got == expected, f"{name}: {workloads.digest(got)} != sort shuffle's {workloads.digest(expected)}"
    assert report["files"]["sort"] == [], f"sort-shuffle files appeared: {report['files']['sort'][:5]}"
    assert report["files"]["sluice"], "no Sluice partition files in the local dirs"
    counters = report["counters"]
    assert "error" not in counters, f"Sluice's metrics could not be read: {counters['error']}"
    assert counters["numRecordsOut"] > 0 and counters["numBytesInRemote"] > 0, counters
    check_fan_in(counters["readers"], executors=2)


def check_fan_in(readers: List[Dict[str, Any]], executors: int) -> None:
    """Every gate of every reducer (a join reads two) opened one channel per executor holding its
    data (its own executor's through one local channel) and sent one request per other executor;
    the control messages stayed within four per executor and gate plus one per frame received,
    whatever the number of map outputs it read."""
    assert readers, "no task read through Sluice"
    for r in readers:
        gates = r["numInputGates"]
        assert gates >= 1, r
        assert r["numPartitionRequests"] <= gates * (executors - 1), r
        assert r["numPartitionRequests"] < r["numInputChannels"] <= gates * executors or (
            r["numBuffersInLocal"] == 0 and r["numInputChannels"] == r["numPartitionRequests"]
        ), r
        assert r["numControlMessages"] <= 4 * executors * gates + r["numBuffersInRemote"], r


ALL = list(workloads.WORKLOADS)
# What a transport setting changes is how buffers cross the wire: these workloads cover small and
# large records, many channels, skew and both record formats (UnsafeRow and Java-serialised).
TRANSPORT = ["df_group_by", "df_join", "large_records", "rdd_group_by_key", "key_skew", "many_partitions"]
# What a starved pool changes is how long channels wait for buffers: the transport's shapes plus
# the gates AQE reshapes (partition ranges, map-index ranges) and 200 mostly empty subpartitions.
# The other workloads differ from these only in Spark's operators, which `defaults` covers.
STARVED = TRANSPORT + ["aqe_coalesce", "aqe_skew_join", "mostly_empty"]

VARIANTS = {
    "defaults": ({}, ALL),
    # Tiny network memory, one exclusive and one floating buffer: everything spills, channels wait.
    "starved_pool": ({"network_memory": "2m", "buffers_per_channel": "1", "floating_buffers_per_gate": "1"}, STARVED),
    # Both transport extremes in one application (each alone is covered by the JVM suites): no
    # credit (the producer pushes while the reader keeps up) and a flush after every record.
    "credit_less_flush_always": ({"credit_based": "false", "buffer_timeout": "0"}, TRANSPORT),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_answers_equal_sort_shuffle(variant: str, reference: Dict[str, Any]) -> None:
    options, names = VARIANTS[variant]
    report = run_app("sluice", options, names=names)
    check_sluice_report(report, {name: reference[name] for name in names})


def test_spark_authentication_and_encryption(reference: Dict[str, Any]) -> None:
    """spark.authenticate and spark.network.crypto.enabled on: Sluice's connections between the
    executors authenticate with the application's secret and encrypt (Spark's AES-GCM channel),
    and the answers stay exact. Then a client from outside the application, which finds the
    executors' Sluice ports in the driver's map output statuses as any reader does, asks them for a
    reduce partition: without the secret or with a wrong one it is refused and gets nothing; with
    the application's secret it gets exactly the partition. So the executors' servers do demand
    the secret the driver set, and their own clients (which carried the workloads) do present it."""
    from sessions import TEST_JAR

    if not TEST_JAR.is_file():
        raise RuntimeError(f"{TEST_JAR} is missing: build it with `run_gradle testJar` (dev/test does)")
    secret = "sluice-test-secret"
    names = ["df_group_by", "large_records", "rdd_group_by_key"]
    conf = {
        "spark.authenticate": "true",
        "spark.authenticate.secret": secret,
        "spark.network.crypto.enabled": "true",
        "spark.jars": str(TEST_JAR),
    }
    report = run_app("sluice", {}, names=names, conf=conf, probe_secret=secret)
    check_sluice_report(report, {name: reference[name] for name in names})

    probe = report["probe"]
    for partition in probe["shuffle"]["partitions"]:
        assert partition["values"] == [i for i in range(4000) if i % 8 == partition["reduce"]], partition["reduce"]
    expected = [i for i in range(4000) if i % 8 == probe["reduce"]]
    right = probe["right"]
    assert len(right["executors"]) == 2, f"map outputs on both executors: {right['executors']}"
    assert right["error"] is None, right["error"]
    assert sorted(right["values"]) == expected and len(right["values"]) == len(expected)
    for name in ("none", "wrong"):
        refused = probe[name]
        assert refused["executors"] == right["executors"]
        assert refused["values"] == [], f"a client with {name} secret received data"
        assert refused["error"] and "InputChannelException" in refused["error"], refused["error"]


def test_spark_io_encryption_encrypts_partition_files(reference: Dict[str, Any]) -> None:
    """spark.io.encryption.enabled with shuffle compression off: the answers stay the sort
    shuffle's, and a marker string carried in the shuffled records is in none of Sluice's .part
    files (read while the application runs), where with encryption off it is in some of them."""
    names = ["marked_records"]
    for encrypted in (True, False):
        conf = {"spark.shuffle.compress": "false", "spark.io.encryption.enabled": str(encrypted).lower()}
        report = run_app("sluice", {}, names=names, conf=conf, marker=workloads.MARKER)
        check_sluice_report(report, {name: reference[name] for name in names})
        parts, marked = report["files"]["sluice"], report["marked_files"]["sluice"]
        if encrypted:
            assert marked == [], (
                f"the marker is readable in {len(marked)} of {len(parts)} encrypted .part files: {marked[:3]}"
            )
        else:
            assert marked, f"with encryption off the marker should be in some of the {len(parts)} .part files"


def test_spark_submit_with_properties_file(reference: Dict[str, Any]) -> None:
    """The spark-submit path: every setting from a --properties-file with plain Spark keys."""
    names = ["df_group_by", "rdd_reduce_by_key", "aqe_coalesce"]
    report = run_app("preconfigured", {"buffers_per_channel": "3"}, via_submit=True, names=names)
    check_sluice_report(report, {name: reference[name] for name in names})


def test_shuffle_20_times_the_network_memory_spills_and_completes() -> None:
    """1 MiB of network memory (32 buffers) per executor and a shuffle of well over 20 MiB: map
    outputs spill to the local dirs, every buffer is reused, and the answer is exact."""
    report = run_app("sluice", {"network_memory": "1m"}, names=["spill_heavy"])
    assert not report["errors"], report["errors"]
    assert report["answers"]["spill_heavy"] == workloads.spill_heavy_expected()
    counters = report["counters"]
    assert "error" not in counters, counters
    assert counters["numBytesOut"] >= 20 * (1 << 20), counters
    assert counters["numBytesInRemote"] > 0
    assert report["files"]["sluice"] and not report["files"]["sort"]
