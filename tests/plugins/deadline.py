"""A deadline for every test phase (setup, call, teardown): ``SLUICE_TEST_TIMEOUT`` seconds (default
900), or ``@pytest.mark.timeout(seconds)`` for a test whose own deadlines are longer. Past it, every
process the phase started (a hung application, its executors, servers) is killed and the test fails
saying so. Like pytest-timeout's signal method, but it also kills what the test started, which
pytest-timeout leaves running; so it is a plugin of its own rather than that dependency.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Generator

import processes
import pytest

DEFAULT_TIMEOUT_S = int(os.environ.get("SLUICE_TEST_TIMEOUT", "900"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "timeout(seconds): this test's deadline per phase, instead of the default")


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
