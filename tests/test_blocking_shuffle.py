"""Regular (blocking) shuffles through Sluice give exactly the sort shuffle's answers.

The workloads of ``workloads.py`` run on Sluice in several configurations, each a Spark application
on a two-executor local-cluster (one Python process can start Spark's driver JVM only once), and
their answers are compared with the sort shuffle's (stored digests, ``reference.py``). Besides the
answers, each run proves Sluice carried the data: no sort-shuffle ``shuffle_*.data`` file appears
in the local dirs, Sluice's partition files do, and Sluice's own counters moved.

Settings that do not get in each other's way share an application (``APPS``); each test reads the
application that has its settings, so five applications test what nine did.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional

import pytest
import reference
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
            settings = dict(spark_conf(**options), **(conf or {}), **{"spark.master": master})
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


def check_sluice_report(report: Dict[str, Any], names: List[str], host_local: bool = False) -> None:
    """The application ran ``names`` (among others) on Sluice, with the sort shuffle's answers,
    reading the other executor's map outputs over the network or, with ``host_local``, from their
    files (no request, no remote byte)."""
    assert not report["errors"], "\n".join(f"{k}:\n{v}" for k, v in report["errors"].items())
    assert report["shuffle_manager"].endswith("SluiceShuffleManager")
    wrong = reference.mismatches(report["answers"], "workloads", names)
    assert not wrong, wrong
    assert report["files"]["sort"] == [], f"sort-shuffle files appeared: {report['files']['sort'][:5]}"
    assert report["files"]["sluice"], "no Sluice partition files in the local dirs"
    counters = report["counters"]
    assert "error" not in counters, f"Sluice's metrics could not be read: {counters['error']}"
    if host_local:
        assert counters["numRecordsOut"] > 0 and counters["numBytesInRemote"] == 0, counters
        assert counters["numBytesInLocal"] > 0, counters
        assert counters["readers"], "no task read through Sluice"
        for r in counters["readers"]:
            assert r["numPartitionRequests"] == 0 and r["numInputChannels"] <= 2 * r["numInputGates"], r
    else:
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
SUBMITTED = ["df_group_by", "rdd_reduce_by_key", "aqe_coalesce"]
AUTHENTICATED = ["df_group_by", "large_records", "rdd_group_by_key"]
SECRET = "sluice-test-secret"
# The marked records' shuffle files are read while the application runs, with compression off (so
# the marker would be readable in plain files); they run last in their application.
UNCOMPRESSED = {"spark.shuffle.compress": "false"}

# The applications, each with the settings of the tests that read it (run_app's arguments).
APPS: Dict[str, Dict[str, Any]] = {
    # Sluice's and Spark's defaults, with Spark's host-local disk reads, which Spark turns off on a
    # local-cluster master unless set (so that its executors fetch from each other as on separate
    # hosts, as the other applications do): each executor reads the other's map outputs from their
    # files, as executors sharing a host of a real cluster do.
    "defaults": {"options": {}, "names": ALL, "conf": {"spark.shuffle.readHostLocalDisk": "true"}},
    # 1 MiB of network memory (32 buffers) per executor, one exclusive and one floating buffer per
    # channel: everything spills, channels wait; and spill_heavy shuffles 20 times that memory.
    "starved_pool": {
        "options": {"network_memory": "1m", "buffers_per_channel": "1", "floating_buffers_per_gate": "1"},
        "names": STARVED + ["spill_heavy"],
    },
    # Both transport extremes in one application (each alone is covered by the JVM suites): no
    # credit (the producer pushes while the reader keeps up) and a flush after every record; with
    # compression and I/O encryption off, the plain partition files the encryption test compares with.
    "credit_less_flush_always": {
        "options": {"credit_based": "false", "buffer_timeout": "0"},
        "names": TRANSPORT + ["marked_records"],
        "conf": dict(UNCOMPRESSED, **{"spark.io.encryption.enabled": "false"}),
        "marker": workloads.MARKER,
    },
    # The spark-submit path, every setting from a --properties-file with plain Spark keys, among
    # them spark.io.encryption.enabled.
    "spark_submit": {
        "options": {"buffers_per_channel": "3"},
        "via_submit": True,
        "names": SUBMITTED + ["marked_records"],
        "conf": dict(UNCOMPRESSED, **{"spark.io.encryption.enabled": "true"}),
        "marker": workloads.MARKER,
    },
}
# The workloads whose answers each application's own test checks (``check_sluice_report``).
VARIANTS = {
    "defaults": ALL,
    "starved_pool": STARVED,
    "credit_less_flush_always": TRANSPORT,
}


def run_named(name: str) -> Dict[str, Any]:
    """Runs the application ``name`` of APPS and returns its report."""
    settings = dict(APPS[name])
    names = settings.pop("names")
    return run_app("preconfigured" if settings.get("via_submit") else "sluice", names=names, **settings)


# One module fixture per application, so that each runs once, when the first test that reads it
# asks, and the tests of different applications can run in different pytest-xdist workers (see
# tests/plugins/scheduling.py: tests that share no module fixture are scheduled apart).
@pytest.fixture(scope="module")
def defaults_app() -> Dict[str, Any]:
    return run_named("defaults")


@pytest.fixture(scope="module")
def starved_pool_app() -> Dict[str, Any]:
    return run_named("starved_pool")


@pytest.fixture(scope="module")
def credit_less_flush_always_app() -> Dict[str, Any]:
    return run_named("credit_less_flush_always")


@pytest.fixture(scope="module")
def spark_submit_app() -> Dict[str, Any]:
    return run_named("spark_submit")


def test_answers_equal_sort_shuffle_with_defaults(defaults_app: Dict[str, Any]) -> None:
    check_sluice_report(defaults_app, VARIANTS["defaults"], host_local=True)


def test_answers_equal_sort_shuffle_with_a_starved_pool(starved_pool_app: Dict[str, Any]) -> None:
    check_sluice_report(starved_pool_app, VARIANTS["starved_pool"])


def test_answers_equal_sort_shuffle_credit_less_flushing_always(credit_less_flush_always_app: Dict[str, Any]) -> None:
    check_sluice_report(credit_less_flush_always_app, VARIANTS["credit_less_flush_always"])


def test_spark_authentication_and_encryption() -> None:
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
    conf = {
        "spark.authenticate": "true",
        "spark.authenticate.secret": SECRET,
        "spark.network.crypto.enabled": "true",
        "spark.jars": str(TEST_JAR),
    }
    report = run_app("sluice", {}, names=AUTHENTICATED, conf=conf, probe_secret=SECRET)
    check_sluice_report(report, AUTHENTICATED)

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


def test_spark_io_encryption_encrypts_partition_files(
    spark_submit_app: Dict[str, Any], credit_less_flush_always_app: Dict[str, Any]
) -> None:
    """spark.io.encryption.enabled with shuffle compression off (the spark-submit application): the
    answers stay the sort shuffle's, and a marker string carried in the shuffled records is in none
    of Sluice's .part files (read while the application runs), where with encryption off (the
    credit-less application, compression off too) it is in some of them."""
    for report, encrypted in ((spark_submit_app, True), (credit_less_flush_always_app, False)):
        check_sluice_report(report, ["marked_records"])
        parts, marked = report["files"]["sluice"], report["marked_files"]["sluice"]
        if encrypted:
            assert marked == [], (
                f"the marker is readable in {len(marked)} of {len(parts)} encrypted .part files: {marked[:3]}"
            )
        else:
            assert marked, f"with encryption off the marker should be in some of the {len(parts)} .part files"


def test_spark_submit_with_properties_file(spark_submit_app: Dict[str, Any]) -> None:
    """The spark-submit path: every setting from a --properties-file with plain Spark keys."""
    check_sluice_report(spark_submit_app, SUBMITTED)


def test_shuffle_20_times_the_network_memory_spills_and_completes(starved_pool_app: Dict[str, Any]) -> None:
    """1 MiB of network memory (32 buffers) per executor and a shuffle of well over 20 MiB: map
    outputs spill to the local dirs, every buffer is reused, and the answer is exact."""
    report = starved_pool_app
    assert not report["errors"], report["errors"]
    assert report["answers"]["spill_heavy"] == workloads.spill_heavy_expected()
    counters = report["counters"]
    assert "error" not in counters, counters
    assert counters["numBytesOut"] >= 20 * (1 << 20), counters
    assert counters["numBytesInRemote"] > 0
    assert report["files"]["sluice"] and not report["files"]["sort"]
