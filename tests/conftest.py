"""Shared pytest setup: Spark on loopback only, always the pyspark installed with Sluice, and one
SparkSession running on Sluice for every test that needs one.

The session is started once (about 13 s) by the first test that asks for the ``spark`` fixture
and stopped at the end. Tests that use it run after all others, because ``sluice.configure``
(which the configuration tests call) refuses to run while a SparkContext is active.

``SLUICE_TEST_MASTER`` picks the master (default ``local[2]``; ``local-cluster[2,1,1024]`` once
remote channels exist).
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any, Iterator, List

import pytest

os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
os.environ.pop("SPARK_HOME", None)

REPO = Path(__file__).resolve().parent.parent
TEST_JAR = REPO / "build" / "test-libs" / "sluice-tests.jar"
# The in-process session: two executor JVMs with two cores each, so that remote channels run
# between them and the four concurrent tasks (2 map + 2 reduce) of a Real-Time Mode query with
# two shuffle partitions fit.
MASTER = os.environ.get("SLUICE_TEST_CLUSTER_MASTER", "local-cluster[2,2,1024]")


def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    """Runs the tests that need the Spark session last (keeping their order)."""
    items.sort(key=lambda item: "spark" in getattr(item, "fixturenames", ()))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    import sluice
    from sluice.config import append_to_list

    if not TEST_JAR.is_file():
        raise RuntimeError(f"{TEST_JAR} is missing: build it with `run_gradle testJar` (dev/test does)")
    builder = (
        SparkSession.builder.master(MASTER)
        .appName("sluice-tests")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.streaming.realTimeMode.allowlistCheck", "false")
        .config("spark.executor.memory", "900m")
    )
    builder = sluice.configure(
        builder,
        prometheus=True,
        buffer_timeout="5ms",
        metrics_report_interval="200ms",
        backpressure_num_samples=20,
        backpressure_delay_between_samples="10ms",
        backpressure_refresh_interval="500ms",
    )
    jars = append_to_list(str(builder._options["spark.jars"]), [str(TEST_JAR)])
    builder = builder.config("spark.jars", jars)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    try:
        yield session
    finally:
        session.stop()


def http_get(url: str, timeout: float = 30.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
        return body.decode("utf-8")


def http_json(url: str) -> Any:
    return json.loads(http_get(url))


def ui_url(spark: Any) -> str:
    url = spark.sparkContext.uiWebUrl
    assert url, "the Spark UI is not running"
    return str(url)

