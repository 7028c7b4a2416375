"""Sluice's metric names: Python's list is the JVM's (generated _metrics.json), the docs list the
same names, and the three ways of switching Sluice on (sluice.configure, `sluice conf` for
spark-submit, conf/sluice.conf.template) give Spark's metrics system the same settings, so the
metrics are named alike on all three; no session is started."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict, List

import pytest
import sluice
from pyspark.sql import SparkSession
from sluice import monitoring
from sluice.cli import main
from sluice.config import PLUGIN

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = REPO / "conf" / "sluice.conf.template"
METRICS_DOC = REPO / "docs" / "metrics.md"
# sluice.configure refuses to run beside a SparkContext in this process.
pytestmark = pytest.mark.usefixtures("without_spark_context")


def configure_path() -> Dict[str, str]:
    return {key: str(value) for key, value in sluice.configure(SparkSession.builder)._options.items()}


def conf_command_path(capsys: pytest.CaptureFixture[str]) -> Dict[str, str]:
    assert main(["conf"]) == 0
    conf: Dict[str, str] = {}
    for line in capsys.readouterr().out.splitlines():
        flag, _, value = line.partition(" ")
        if flag == "--jars":
            conf["spark.jars"] = value
        else:
            assert flag == "--conf", line
            key, _, setting = value.partition("=")
            conf[key] = setting
    return conf


def template_path() -> Dict[str, str]:
    """The settings spark-submit --properties-file reads from the template as shipped."""
    conf: Dict[str, str] = {}
    for line in TEMPLATE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.split(None, 1)
            conf[key] = value.strip()
    return conf


def spark_metric_names(conf: Dict[str, str], executor_id: str) -> List[str]:
    """The names Spark's metrics system gives Sluice's metrics under ``conf`` (Spark's rule:
    ``<spark.metrics.namespace, else spark.app.id>.<executor id>.<source>.<metric>``), or none
    when Sluice's plugin, which publishes them, is not on."""
    if PLUGIN not in conf.get("spark.plugins", "").split(","):
        return []
    namespace = conf.get("spark.metrics.namespace", "${spark.app.id}")
    metrics = monitoring.FLINK_METRICS_COUNTERS + monitoring.FLINK_METRICS_GAUGES + monitoring.EXECUTOR_METRICS
    return [f"{namespace}.{executor_id}.{monitoring.METRICS_SOURCE}.{name}" for name in metrics]


def test_the_three_ways_of_switching_sluice_on_name_the_metrics_alike(capsys: pytest.CaptureFixture[str]) -> None:
    paths = {
        "sluice.configure": configure_path(),
        "sluice conf": conf_command_path(capsys),
        "template": template_path(),
    }
    for name, conf in paths.items():
        # Nothing that renames metrics: Spark's own keep the application's namespace.
        assert not [key for key in conf if key.startswith("spark.metrics.")], name
        assert conf["spark.shuffle.manager"] == paths["sluice.configure"]["spark.shuffle.manager"], name
    names = {name: spark_metric_names(conf, "1") for name, conf in paths.items()}
    assert names["sluice.configure"] == names["sluice conf"] == names["template"]
    assert "${spark.app.id}.1.sluice.numRecordsOut" in names["template"]
    assert "${spark.app.id}.1.sluice.TotalMemorySegments" in names["template"]


def test_the_metric_table_is_the_jvms_and_feeds_the_python_columns() -> None:
    table = json.loads((Path(monitoring.__file__).parent / "_metrics.json").read_text(encoding="utf-8"))
    assert table["source"] == monitoring.METRICS_SOURCE == "sluice"
    task = [m["name"] for m in table["metrics"] if m["scope"] == "task"]
    assert [name for name, _ in monitoring.FLINK_METRICS] == task
    assert set(monitoring.FLINK_METRICS_COUNTERS) | set(monitoring.FLINK_METRICS_GAUGES) == set(task)
    assert "numBytesInRemote" in monitoring.FLINK_METRICS_COUNTERS
    assert "outPoolUsage" in monitoring.FLINK_METRICS_GAUGES
    assert monitoring.EXECUTOR_METRICS[:3] == ("TotalMemorySegments", "AvailableMemorySegments", "UsedMemorySegments")
    assert monitoring.SERVER_METRICS == monitoring.EXECUTOR_METRICS[3:]
    assert "readQueueLength" in monitoring.SERVER_METRICS and "readWaitTimeMs" in monitoring.SERVER_METRICS
    assert monitoring.EXECUTOR_COUNTERS == ("indexBytesRead", "indexBytesNeeded")
    assert set(monitoring.EXECUTOR_COUNTERS) <= set(monitoring.EXECUTORS_SCHEMA.names)


def test_the_docs_describe_every_metric_of_the_table() -> None:
    doc = METRICS_DOC.read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(\w+)`(?: / `(\w+)`)?", doc, re.MULTILINE))
    names = {name for pair in documented for name in pair if name}
    table = json.loads((Path(monitoring.__file__).parent / "_metrics.json").read_text(encoding="utf-8"))
    expected = {m["name"] for m in table["metrics"] if not m["name"].endswith("PerSecond") or "Time" in m["name"]}
    assert expected - names == set(), "metrics missing from docs/metrics.md"
    assert names - expected == set(), "docs/metrics.md lists metrics the JVM does not define"
