"""Sluice's map outputs in Spark's decommissioning fallback storage (``local-cluster``, a local
fallback path): the only executor is decommissioned between the map and the reduce stage, no peer
can take its outputs, they go to the fallback storage, and a new executor reads them back exactly
without running a map task again. Nothing of the application is left there after it ends, with
``spark.storage.decommission.fallbackStorage.cleanUp`` at Spark's default (false). Only this test's
application and directory are observed."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import pytest
import sessions

REPO = Path(__file__).resolve().parent.parent
TEST_JAR = REPO / "build" / "test-libs" / "sluice-tests.jar"
MAPS = 5


@pytest.fixture(scope="module")
def fallback_run(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    assert TEST_JAR.is_file(), f"{TEST_JAR} is missing: build it with `run_gradle testJar` (dev/test does)"
    work = tmp_path_factory.mktemp("fallback-storage-app")
    fallback = tmp_path_factory.mktemp("fallback-storage")
    result, stderr = sessions.run_runner(
        "run_fallback_storage.py", ["--fallback", str(fallback), "--test-jar", str(TEST_JAR)], work, timeout=900
    )
    result["stderr"] = stderr
    result["fallback"] = str(fallback)
    return result


def test_the_only_executors_map_outputs_go_to_the_fallback_storage(fallback_run: Dict[str, Any]) -> None:
    r = fallback_run
    before, after = r["before"], r["after"]
    assert len(before) == MAPS and {m["executor"] for m in before} == set(r["executorsBefore"]), before
    assert all(m["topology"].startswith("sluice:") for m in before), before
    # Every map output now lives in the fallback storage, under Spark's placeholder with Sluice's marker.
    assert [m["mapId"] for m in after] == [m["mapId"] for m in before], after
    assert all(m["executor"] == "fallback" and m["topology"] == "sluice-fallback" for m in after), after
    # ... as a copy of its partition file and its index, under the application's and the shuffle's directory.
    shuffle = r["shuffleId"]
    expected_files = sorted(f"{shuffle}/sluice-{m['mapId']}.{kind}" for m in before for kind in ("data", "index"))
    assert r["fallbackFiles"] == expected_files, r["fallbackFiles"]
    assert not set(r["executorsAfter"]) & set(r["executorsBefore"]), r


def test_a_new_executor_reads_them_back_exactly_without_a_map_task(fallback_run: Dict[str, Any]) -> None:
    r = fallback_run
    assert r["got"] == r["expected"]
    jobs = {j["id"]: j for j in r["jobs"]}
    stages = {s["id"]: s for s in r["stages"]}
    assert len(jobs) == 2 and all(j["status"] == "SUCCEEDED" for j in jobs.values()), jobs
    map_job, reduce_job = sorted(jobs)
    map_stage = jobs[map_job]["stageIds"][0]
    reduce_map_stage, reduce_stage = sorted(jobs[reduce_job]["stageIds"])
    assert stages[map_stage]["completedTasks"] == MAPS and stages[map_stage]["attempt"] == 0, stages
    assert stages[reduce_map_stage]["completedTasks"] == 0, f"the map stage ran again: {stages}"
    assert stages[reduce_stage]["attempt"] == 0 and stages[reduce_stage]["failedTasks"] == 0, stages
    fetch_failures = [e for s in r["attempts"] for e in s["task_errors"] if "FetchFailed" in e]
    assert fetch_failures == [], fetch_failures


def test_nothing_of_the_application_is_left_in_the_fallback_storage(fallback_run: Dict[str, Any]) -> None:
    left = [str(p) for p in Path(fallback_run["fallback"]).rglob("*")]
    assert left == [], left
