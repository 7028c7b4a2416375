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
import zipfile
from pathlib import Path
from typing import Any, Iterator, List

import pytest

os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
os.environ.pop("SPARK_HOME", None)

REPO = Path(__file__).resolve().parent.parent
TEST_JAR = REPO / "build" / "test-libs" / "sluice-tests.jar"
MASTER = os.environ.get("SLUICE_TEST_MASTER", "local[2]")


def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    """Runs the tests that need the Spark session last (keeping their order)."""
    items.sort(key=lambda item: "spark" in getattr(item, "fixturenames", ()))


def _jar_has_class(jar: str, class_name: str) -> bool:
    with zipfile.ZipFile(jar) as z:
        return class_name.replace(".", "/") + ".class" in z.namelist()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    import sluice
    from sluice.config import PIPELINED_SHUFFLE_MANAGER, append_to_list

    if not TEST_JAR.is_file():
        raise RuntimeError(f"{TEST_JAR} is missing: build it with `run_gradle testJar` (dev/test does)")
    builder = (
        SparkSession.builder.master(MASTER)
        .appName("sluice-tests")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
    )
    builder = sluice.configure(
        builder,
        prometheus=True,
        metrics_report_interval="200ms",
        backpressure_num_samples=20,
        backpressure_delay_between_samples="10ms",
        backpressure_refresh_interval="500ms",
    )
    jars = append_to_list(str(builder._options["spark.jars"]), [str(TEST_JAR)])
    builder = builder.config("spark.jars", jars)
    if not _jar_has_class(sluice.jar_path(), PIPELINED_SHUFFLE_MANAGER):
        # Sluice's pipelined manager lives on another branch for now: keep Spark's built-in one.
        builder = builder.config("spark.shuffle.manager.incremental", "streaming")
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
