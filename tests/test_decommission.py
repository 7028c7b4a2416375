"""Decommissioning an executor that holds Sluice map outputs loses no shuffle data: its
BlockManager moves the finished partitions to the other executors through Sluice's block
resolver, the driver points the map outputs at them, and the reduce stage reads them there with
no recompute and no fetch failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TEST_JAR = os.path.join(os.path.dirname(HERE), "build", "test-libs", "sluice-tests.jar")


def test_decommissioned_executor_hands_its_map_outputs_to_peers() -> None:
    assert os.path.isfile(TEST_JAR), f"{TEST_JAR} is missing: build it with `run_gradle testJar` (dev/test does)"
    out = os.path.join(tempfile.mkdtemp(prefix="sluice-decommission-"), "result.json")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    env.pop("SPARK_HOME", None)
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "run_decommission.py"), "--out", out, "--test-jar", TEST_JAR],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    with open(out) as f:
        r = json.load(f)
    victim = r["victim"]
    before = r["before"]
    assert sum(1 for m in before if m["executor"] == victim) >= 1
    # The executor left, and every map output it held now lives on a live peer, with that
    # peer's Sluice port.
    assert victim not in r["executorsAfter"]
    after = {m["mapId"]: m for m in r["after"]}
    assert len(after) == len(before) and not any(m.get("missing") for m in r["after"])
    ports = {m["executor"]: m["topology"] for m in before}
    for m in before:
        moved = after[m["mapId"]]
        if m["executor"] == victim:
            assert moved["executor"] in r["executorsAfter"], moved
            assert moved["topology"] == ports[moved["executor"]], (moved, ports)
        else:
            assert moved == m
    assert r["got"] == r["expected"]
    # No recompute, no fetch failure: the map stage ran once (the reduce job's copy of it was
    # skipped), and the reduce stage's single attempt had no failed task.
    jobs = {j["id"]: j for j in r["jobs"]}
    stages = {s["id"]: s for s in r["stages"]}
    assert all(j["status"] == "SUCCEEDED" for j in jobs.values()), jobs
    map_stage, reduce_map_stage, reduce_stage = jobs[0]["stageIds"][0], *sorted(jobs[1]["stageIds"])
    assert stages[map_stage]["completedTasks"] == 6 and stages[map_stage]["attempt"] == 0
    assert stages[reduce_map_stage]["completedTasks"] == 0, "the map stage ran again"
    assert stages[reduce_stage]["attempt"] == 0 and stages[reduce_stage]["failedTasks"] == 0, stages
    assert "FetchFailed" not in proc.stderr, proc.stderr[-3000:]
