"""Shared pytest setup: Spark on loopback only, always the pyspark installed with Sluice, and one
SparkSession running on Sluice for every test that needs one.

The session is started once (about 13 s) by the first test that asks for the ``spark`` fixture
and stopped at the end. Tests that use it run after the tests that need no SparkContext in this
process (``without_spark_context``: ``sluice.configure`` refuses to run while one is active).

Three concerns are plugins of their own, registered here: the order tests run in and their
distribution over pytest-xdist's workers (``plugins/scheduling.py``), every test phase's deadline
(``plugins/deadline.py``), and the options of every JVM the tests start (``plugins/jvm_options.py``).

``SLUICE_TEST_CLUSTER_MASTER`` picks its master (see ``sessions.SESSION_MASTER``). Helpers the
tests share live in ``sessions.py`` (and ``sparkjobs.py``), never here: tests do not import
conftest.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Dict, Iterator

import pytest
from sessions import SESSION_MASTER, TEST_JAR, build_session, use_app_env

pytest_plugins = ["plugins.scheduling", "plugins.deadline", "plugins.jvm_options"]

use_app_env()

_module_seconds: Dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0]
    _module_seconds[module] = _module_seconds.get(module, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Each module's time (setup, call and teardown of its tests, whichever worker ran them)."""
    if _module_seconds:
        terminalreporter.write_sep("=", "seconds per module")
        for module, seconds in sorted(_module_seconds.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{seconds:8.1f}  {module}")


@pytest.fixture
def without_spark_context() -> None:
    """For a test that needs no SparkContext running in this process (``sluice.configure`` and the
    driver-JVM checks refuse one): such tests run before the shared session starts."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        raise RuntimeError("a SparkContext is running in this test process: this test must run before the session")


@pytest.fixture(scope="session", autouse=True)
def temporary_files_under_pytest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every temporary directory the tests and their child processes make with ``tempfile`` (work
    and local dirs, streaming checkpoints, browser profiles) goes under pytest's base temporary
    directory, which pytest prunes to the last three runs, instead of staying in /tmp for good."""
    root = str(tmp_path_factory.mktemp("tempfile"))
    previous_dir, previous_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = root
    os.environ["TMPDIR"] = root
    try:
        yield
    finally:
        tempfile.tempdir = previous_dir
        if previous_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = previous_env


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    if not TEST_JAR.is_file():
        raise RuntimeError(f"{TEST_JAR} is missing: build it with `run_gradle testJar` (dev/test does)")
    # The executors' metrics systems also write every metric to CSV files here each second, so a
    # test can see what they publish on a cluster, where the driver's Prometheus servlet does not.
    executor_metrics = tempfile.mkdtemp(prefix="sluice-executor-metrics-")
    session = build_session(
        "sluice-tests",
        "sluice",
        SESSION_MASTER,
        conf={
            "spark.metrics.conf.executor.sink.csv.class": "org.apache.spark.metrics.sink.CsvSink",
            "spark.metrics.conf.executor.sink.csv.period": "1",
            "spark.metrics.conf.executor.sink.csv.unit": "seconds",
            "spark.metrics.conf.executor.sink.csv.directory": executor_metrics,
            "spark.sql.shuffle.partitions": "4",
            "spark.sql.streaming.realTimeMode.allowlistCheck": "false",
            "spark.executor.memory": "900m",
        },
        jars=[str(TEST_JAR)],
        prometheus=True,
        options={
            "buffer_timeout": "5ms",
            "metrics_report_interval": "200ms",
            "backpressure_num_samples": 20,
            "backpressure_delay_between_samples": "10ms",
            "backpressure_refresh_interval": "500ms",
        },
        log_level="WARN",
    )
    with session:
        yield session
