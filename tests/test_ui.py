"""The Sluice tab of Spark's UI, its JSON, Spark's Prometheus servlet, and the tab in a real
browser (headless Chromium), with a screenshot for the docs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, List

import pytest
import sluice
from sessions import REPO, http_get, http_json, ui_url
from sparkjobs import Background, SlowConsumerQuery, run_in_group, sample_until_all_tasks_seen, shuffle_rows

SCREENSHOT = REPO / "docs" / "sluice-ui-tab.png"


def prometheus_name(spark: Any, executor_id: str, metric: str) -> str:
    """What Spark's Prometheus servlet calls a Sluice metric: ``metrics_`` and the registry name
    ``<application id>.<executor id>.sluice.<metric>`` with every other character as ``_``."""
    key = f"{spark.sparkContext.applicationId}.{executor_id}.{sluice.monitoring.METRICS_SOURCE}.{metric}"
    return "metrics_" + re.sub("[^a-zA-Z0-9]", "_", key) + "_"


def test_tab_and_json_serve(spark: Any) -> None:
    stages = run_in_group(spark, "sluice-ui", lambda: shuffle_rows(spark, 10_000))
    sluice.metrics(spark)  # wait until the executors reported the job
    page = http_get(f"{ui_url(spark)}/sluice/")
    assert 'id="sluice-stages"' in page and 'id="sluice-executors"' in page
    assert ">Sluice<" in page  # the tab in the navigation bar
    for stage in stages:
        if f'data-stage-id="{stage}"' in page:
            break
    else:
        pytest.fail(f"none of the job's stages {stages} is in the stage table")
    data = http_json(f"{ui_url(spark)}/sluice/json")
    assert {"executors", "stages", "tasks"} <= set(data)
    stage = next(s for s in data["stages"] if s["stage_id"] in stages and s["numRecordsIn"] > 0)
    for key in (
        "backpressure_level",
        "backpressure_ratio",
        "cause",
        "inPoolUsage",
        "numBytesInLocal",
        "buffer_fill_rate",
    ):
        assert key in stage
    assert stage["backpressure_level"] in ("OK", "LOW", "HIGH")
    task = data["tasks"][0]
    for key in ("outPoolUsage", "numBuffersInRemote", "busyTimeMsPerSecond", "task_attempt_id"):
        assert key in task
    details = http_get(f"{ui_url(spark)}/sluice/?stage={stage['stage_id']}")
    assert 'id="sluice-tasks"' in details


def test_prometheus_lists_sluice_metrics(spark: Any) -> None:
    run_in_group(spark, "sluice-prometheus", lambda: shuffle_rows(spark, 10_000))
    sluice.metrics(spark)
    text = http_get(f"{ui_url(spark)}/metrics/prometheus")
    names = {line.split("{")[0] for line in text.splitlines() if not line.startswith("#")}
    # Local mode: the driver JVM runs the executor; on a cluster the driver publishes the
    # application's values from the executors' reports. Both under the driver's id.
    counters = [prometheus_name(spark, "driver", name) + "Count" for name in sluice.monitoring.FLINK_METRICS_COUNTERS]
    gauges = [
        prometheus_name(spark, "driver", name) + "Value"
        for name in sluice.monitoring.EXECUTOR_METRICS + sluice.monitoring.FLINK_METRICS_GAUGES
    ]
    missing = [metric for metric in counters + gauges if metric not in names]
    assert not missing, f"{missing} not among {sorted(n for n in names if '_sluice_' in n)}"
    records_out = prometheus_name(spark, "driver", "numRecordsOut") + "Count"
    values = [line for line in text.splitlines() if line.split("{")[0] == records_out]
    assert float(values[0].rsplit(" ", 1)[1]) >= 10_000
    # Spark's own metrics keep the application id as their namespace (Sluice does not rename them).
    spark_own = "metrics_" + re.sub("[^a-zA-Z0-9]", "_", spark.sparkContext.applicationId) + "_driver_BlockManager_"
    assert any(n.startswith(spark_own) for n in names)


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise AssertionError("Chromium is not installed (dev/env.sh installs it: apt-get install -y chromium)")


def screenshot(url: str, docs_png: Path) -> Path:
    """A headless-Chromium screenshot of ``url``, checked to be a real picture: into ``docs_png`` (the
    docs' picture) with ``SLUICE_UPDATE_SCREENSHOT=1``, else into tests/.work."""
    update_docs = os.environ.get("SLUICE_UPDATE_SCREENSHOT") == "1"
    target = docs_png if update_docs else REPO / "tests" / ".work" / docs_png.name
    target.parent.mkdir(parents=True, exist_ok=True)
    run_chromium([f"--screenshot={target}", url])
    assert target.is_file() and target.stat().st_size > 10_000
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return target


def run_chromium(args: List[str]) -> str:
    with tempfile.TemporaryDirectory(prefix="sluice-chromium-") as profile:
        flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--window-size=1600,1300",
            "--hide-scrollbars",
        ]
        result = subprocess.run([chromium()] + flags + args, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        return result.stdout


def stage_row(dom: str, stage: int) -> str:
    """The opening <tr> tag of ``stage``'s row in the stage table (not the batch-diagnosis table's)."""
    match = re.search(rf'<tr class="sluice-stage"[^>]*data-stage-id="{stage}"[^>]*>', dom)
    assert match, f"stage {stage} is not in the stage table"
    return match.group(0)


def test_the_tab_renders_in_headless_chromium(spark: Any) -> None:
    """A HIGH stage (the producers of a slow-consumer Real-Time Mode query) next to an OK one (tasks
    sleeping in Python) and the
    unsampled stages of earlier jobs, as a browser shows them. The screenshot goes to
    tests/.work/, or to docs/ with SLUICE_UPDATE_SCREENSHOT=1."""
    sc = spark.sparkContext
    run_in_group(spark, "sluice-ui-done", lambda: shuffle_rows(spark, 10_000))

    def sleepy(rows: Iterator[Any]) -> Iterator[int]:
        time.sleep(8)
        yield sum(1 for _ in rows)

    idle = Background(
        spark,
        "sluice-ui-idle",
        lambda: sc.parallelize(range(100), 1).map(lambda x: (x, x)).partitionBy(1).mapPartitions(sleepy).sum(),
    )
    idle_stage = idle.running_stage()
    assert sample_until_all_tasks_seen(spark, idle_stage, tasks=1)["backpressure_level"] == "OK"
    assert idle.join() == 100
    slow = SlowConsumerQuery(spark, "ui_slow_consumer")
    try:
        slow_stage, _, _, _ = slow.backpressured_stages()
    finally:
        slow.stop()  # no newer batches: the HIGH stage stays near the top of the page
    url = f"{ui_url(spark)}/sluice/"
    dom = run_chromium(["--dump-dom", url])
    assert 'id="sluice-stages"' in dom and 'id="sluice-executors"' in dom
    assert f'data-stage-id="{slow_stage}"' in dom and f'data-stage-id="{idle_stage}"' in dom
    assert 'data-level="HIGH"' in stage_row(dom, slow_stage)
    assert 'data-level="OK"' in stage_row(dom, idle_stage)
    assert "sluice-level-HIGH" in dom and "sluice-level-OK" in dom
    compact = dom.replace(" ", "")
    assert "background-color:#d9534f" in compact  # HIGH in Flink's red
    assert "background-color:#5cb85c" in compact  # OK in Flink's green
    screenshot(url, SCREENSHOT)
