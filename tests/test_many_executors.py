"""Many small executors: Sluice on ``local-cluster[12,1,512]`` (twelve executors of one core and
512 MiB) gives the sort shuffle's exact answers to the workloads of ``workloads.py`` whose reads
grow with the executors (``MANY_EXECUTOR_WORKLOADS``) and to the 1500 x 400 wide shape of
``run_real_shapes.py`` (answers stored by ``reference.py``), in one application
(``run_many_executors.py``).

Every reducer's gate reads from up to twelve executors, past ``max_required_buffers_per_gate``'s
sixteen exclusive buffers (two per remote channel), so its channels read with floating buffers
only; ``record_spill_threshold`` at its floor (64 KiB) sends the rows of ``large_records`` (100 to
300 KB, from several executors at once) to disk while they are gathered. What the gates hold and
what the partial records take of the heap are measured in the JVM suites (GateBuffersSuite,
SpilledRecordSuite), where they can be counted exactly; this is the Spark-level run.

Twelve JVMs share two cores here, so the executors compile with C1 only and collect with the
serial collector (``spark.executor.extraJavaOptions``): the tests' cost is the executors' start and
JIT, not the shuffle, and neither setting changes what Sluice does.
"""

from __future__ import annotations

import os
from typing import Any, Dict

import pytest
import reference
import workloads
from test_real_shapes import run_app

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "run_many_executors.py")
MASTER = "local-cluster[12,1,512]"
SHAPES = ["wide_1500x400"]
# The workloads whose reads change with the number of executors: records spanning buffers from
# many channels at once, a join's two gates, a skewed reducer reading from every executor, many
# reducers each reading twelve executors, and AQE's map-range reads. The others read no
# differently from twelve executors than from two, and each costs the suite twelve executors' JIT.
MANY_EXECUTOR_WORKLOADS = [
    "large_records",
    "df_join",
    "rdd_group_by_key",
    "key_skew",
    "many_partitions",
    "aqe_skew_join",
]


@pytest.fixture(scope="module")
def many() -> Dict[str, Any]:
    assert set(MANY_EXECUTOR_WORKLOADS) <= set(workloads.WORKLOADS), "a workload of this test is gone"
    args = [
        RUNNER,
        "--workloads",
        ",".join(MANY_EXECUTOR_WORKLOADS),
        "--shapes",
        ",".join(SHAPES),
        "--option=record_spill_threshold=64k",
        "--conf=spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    ]
    report = run_app(args, timeout=2400, master=MASTER)
    assert report["shuffle_manager"].endswith("SluiceShuffleManager")
    assert report["executors"] == 12, f"{report['executors']} executors registered, not 12"
    return report


@pytest.mark.timeout(2400)  # the application's own deadline
def test_every_workload_gives_the_sort_shuffles_answer_on_12_executors(many: Dict[str, Any]) -> None:
    assert not many["errors"], "\n".join(f"{k}:\n{v[-3000:]}" for k, v in many["errors"].items())
    wrong = reference.mismatches(many["answers"], "workloads", MANY_EXECUTOR_WORKLOADS)
    assert not wrong, wrong


def test_the_wide_shape_gives_the_sort_shuffles_answer_on_12_executors(many: Dict[str, Any]) -> None:
    for name in SHAPES:
        run = many["shapes"][name]
        assert "error" not in run, f"{name} failed after {run['seconds']}s: {run['key_errors']}\n{run['error'][-3000:]}"
        wrong = reference.mismatches({name: run["answer"]}, "real_shapes", [name])
        assert not wrong, wrong


def test_reducers_read_from_many_executors_one_channel_each(many: Dict[str, Any]) -> None:
    """Sluice's own metrics: reducers read from all twelve executors (eleven requests, and their own
    executor's outputs through a local channel), and no gate opened more channels than there are
    executors, however many map outputs it read."""
    counters = many["counters"]
    assert "error" not in counters, f"Sluice's metrics could not be read: {counters['error']}"
    readers = counters["readers"]
    assert readers, "no task read through Sluice"
    assert any(
        r["numInputGates"] == 1 and r["numPartitionRequests"] == 11 and r["numInputChannels"] == 12 for r in readers
    ), readers[:5]
    for r in readers:
        assert r["numInputChannels"] <= 12 * r["numInputGates"], r
