"""Shared pytest setup: Spark on loopback only, always the pyspark installed with Sluice, and one
SparkSession running on Sluice for every test that needs one.

The session is started once (about 13 s) by the first test that asks for the ``spark`` fixture
and stopped at the end. Tests that use it run after the tests that need no SparkContext in this
process (``without_spark_context``: ``sluice.configure`` refuses to run while one is active).

``dev/test`` runs the tests in parallel worker processes (pytest-xdist, ``--dist loadscope``, with
the scheduler below),
since most of them wait on Spark applications of their own: the tests of a module that share a
module fixture (a cluster, an application) run in one worker in order, and so do all the tests of
the in-process session, after the tests that need none; every other test goes to whichever worker
is free. Every test phase (setup, call, teardown) has a deadline (``SLUICE_TEST_TIMEOUT``, default
900 s; ``@pytest.mark.timeout(s)`` for a test whose own deadlines are longer): past it, every
process the phase started is killed (a hung application, its executors, servers) and the test
fails saying so.

``SLUICE_TEST_CLUSTER_MASTER`` picks its master (see ``sessions.SESSION_MASTER``). Helpers the
tests share live in ``sessions.py`` (and ``sparkjobs.py``), never here: tests do not import
conftest.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
from typing import Any, Dict, Generator, Iterator, List

import processes
import pytest
from sessions import SESSION_MASTER, TEST_JAR, build_session, use_app_env

use_app_env()
# Every JVM the tests start (drivers, executors, Workers, servers) lives seconds to minutes: it
# spends more CPU compiling with C2 than C2's code saves it. C1 alone halves a test application's
# CPU time on two cores (47 to 26 CPU-seconds for one of test_blocking_shuffle's applications) and
# changes nothing it does. The benchmarks never run with it.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")

DEFAULT_TIMEOUT_S = int(os.environ.get("SLUICE_TEST_TIMEOUT", "900"))
# The xdist group of the tests that share this process's SparkContext, or need none in it.
IN_PROCESS = "in-process-session"
# Where the workers write each test's group for the controller's scheduler (an environment variable).
GROUPS_FILE = "SLUICE_TEST_GROUPS_FILE"
# The groups that take longest (minutes, most of it waiting on their Spark applications), longest
# first; every other module takes seconds.
LONGEST_FIRST = (
    IN_PROCESS,
    "tests/test_cluster.py",
    "tests/test_yarn.py",
    "tests/test_real_shapes.py",
    "tests/test_blocking_shuffle.py",
    "tests/test_connect_history.py",
    "tests/test_executor_loss.py",
    "tests/test_packaging.py",
    "tests/test_cli.py",
)


def _in_process_rank(item: pytest.Item) -> int:
    """0 for the tests that need no SparkContext in this process, 2 for those that use the shared
    session, 1 for the others."""
    names = getattr(item, "fixturenames", ())
    return 2 if "spark" in names else 0 if "without_spark_context" in names else 1


def _group(item: pytest.Item) -> str:
    """The test's xdist group: the in-process session's; its module's, when it shares a module
    fixture (an application, a cluster) with the module's other tests; else its own."""
    if _in_process_rank(item) != 1:
        return IN_PROCESS
    module = item.nodeid.split("::", 1)[0]
    fixtures = getattr(item, "_fixtureinfo", None)
    definitions = fixtures.name2fixturedefs.values() if fixtures is not None else []
    shared = any(defs[-1].scope in ("module", "package", "class") for defs in definitions)
    return module if shared else item.nodeid


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Runs the tests that share this process's session last, after the ones that must run before
    it, and the longest modules first; in a pytest-xdist worker, also writes each test's group (see
    ``_group``) where the scheduler reads it."""

    def longest_first(item: pytest.Item) -> int:
        group = IN_PROCESS if _group(item) == IN_PROCESS else item.nodeid.split("::", 1)[0]
        return LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=lambda item: (longest_first(item), _in_process_rank(item)))
    groups_file = os.environ.get(GROUPS_FILE)
    if groups_file and hasattr(config, "workerinput"):
        worker_copy = f"{groups_file}.{config.workerinput['workerid']}"
        with open(worker_copy, "w") as f:
            json.dump({item.nodeid: _group(item) for item in items}, f)
        os.replace(worker_copy, groups_file)  # every worker collects the same tests: any copy will do


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "timeout(seconds): this test's deadline per phase, instead of the default")
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        # The controller: where its workers (which inherit the environment) write the tests' groups.
        os.environ[GROUPS_FILE] = os.path.join(tempfile.mkdtemp(prefix="sluice-test-groups-"), "groups.json")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's scheduling by scope, with this suite's groups as scopes (``_group``; the
    controller collects no tests, so its workers tell it), and a worker takes its next group only
    when its current one is down to its last test (pytest-xdist hands out a second one at once):
    the groups here take minutes, and one queued behind a long group would wait for nothing while
    another worker idles."""
    from xdist.scheduler import LoadScopeScheduling

    class OneGroupAhead(LoadScopeScheduling):  # type: ignore[misc]
        groups: Dict[str, str] = {}

        def _split_scope(self, nodeid: str) -> str:
            if not self.groups:
                with open(os.environ[GROUPS_FILE]) as f:
                    self.groups = json.load(f)
            return self.groups.get(nodeid, nodeid)

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            # A worker runs its last test only once it knows the next one (or is told to stop).
            if self._pending_of(self.assigned_work[node]) > 1:
                return
            self._assign_work_unit(node)

    return OneGroupAhead(config, log)


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with _deadline(item, "setup"):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with _deadline(item, "call"):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    with _deadline(item, "teardown"):
        yield


class _deadline:
    """Fails the test phase when it outlives its deadline, after killing every process it started."""

    def __init__(self, item: pytest.Item, phase: str) -> None:
        marker = item.get_closest_marker("timeout")
        self.seconds = int(marker.args[0]) if marker else DEFAULT_TIMEOUT_S
        self.what = f"{item.nodeid} ({phase})"

    def __enter__(self) -> None:
        self.armed = threading.current_thread() is threading.main_thread()  # where signals are delivered
        if not self.armed:
            return
        self.before = processes.descendants()
        self.previous = signal.signal(signal.SIGALRM, self._expire)
        signal.alarm(self.seconds)

    def __exit__(self, *exc: object) -> None:
        if not self.armed:
            return
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.previous)

    def _expire(self, _signum: int, _frame: object) -> None:
        killed = processes.kill_started_since(self.before)
        pytest.fail(
            f"{self.what} ran past its deadline of {self.seconds}s (SLUICE_TEST_TIMEOUT or @pytest.mark.timeout): "
            f"killed the {len(killed)} processes it had started ({', '.join(map(str, killed[:20]))})",
            pytrace=False,
        )


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
