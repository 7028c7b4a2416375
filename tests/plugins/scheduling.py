"""Scheduling of the test suite: the order tests run in, and pytest-xdist's distribution of them.

Tests that share this process's SparkContext run last, after the ones that need none in it; the
longest modules run first. Under pytest-xdist (``dev/test``: ``-n 3 --dist loadscope``) a *group*
of tests runs in one worker in order: the tests of the in-process session; the tests of a module
that share a module fixture (an application, a cluster); every other test alone. A worker takes
its next group only when its current one is down to its last test.

Why a scheduler of our own: ``--dist loadgroup`` with ``xdist_group`` marks would express the
groups, but on pytest 9 it silently stops grouping, because it carries the group as a suffix of
the test's node id, which pytest no longer lets it change (pytest-dev/pytest-xdist#1386, open).
So the workers write each test's group to a file the controller's scheduler reads, and the
scheduler is xdist's ``LoadScopeScheduling`` with its scope function and its rescheduling
replaced. Both are private methods of pytest-xdist: ``pyproject.toml`` pins the pytest and
pytest-xdist versions this was written against (pytest 9.2.0, pytest-xdist 3.8.0).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any, Dict, List

import pytest

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
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        # The controller: where its workers (which inherit the environment) write the tests' groups.
        os.environ[GROUPS_FILE] = os.path.join(tempfile.mkdtemp(prefix="sluice-test-groups-"), "groups.json")


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller removes the directory of the groups file it made (``pytest_configure``)."""
    groups_file = os.environ.get(GROUPS_FILE)
    if groups_file and not hasattr(config, "workerinput"):
        shutil.rmtree(os.path.dirname(groups_file), ignore_errors=True)
        del os.environ[GROUPS_FILE]


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
