"""Scheduling of the test suite: the order tests run in, and pytest-xdist's distribution of them.

Tests that share this process's SparkContext run last, after the ones that need none in it; the
longest groups run first. Under pytest-xdist (``dev/test``: ``-n 3 --dist loadscope``) a *group*
of tests runs in one worker in order: the tests of the in-process session; the tests of a module
that share a module fixture (an application, a cluster), directly or through another test of the
module (two applications of one module that no test reads together are two groups); every other
test alone. A worker takes its next group only when its current one is down to its last test.

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
from typing import Any, Dict, List, Tuple

import pytest

# The xdist group of the tests that share this process's SparkContext, or need none in it.
IN_PROCESS = "in-process-session"
# Where the workers write each test's group for the controller's scheduler (an environment variable).
GROUPS_FILE = "SLUICE_TEST_GROUPS_FILE"
# The groups that take longest (minutes, most of it waiting on their Spark applications), longest
# first, by the node id they start with: a worker then ends with the short ones, and no long
# group starts when the others are nearly done. Measured at load 25-30 on 2 cores (seconds): the
# cluster's 4 applications 370, the in-process session's tests 300, test_blocking_shuffle's
# groups 60-165, yarn 185, the wide real shapes 170 and the other real shapes 50-120 each, the
# batch diagnosis 100 and 60, Connect and the History Server 100, big rows 70, the wheel 60, the
# executor start 55, the demo 55. Every other module takes seconds.
LONGEST_FIRST = (
    "tests/test_cluster.py",
    "tests/test_many_executors.py",
    IN_PROCESS,
    "tests/test_yarn.py",
    "tests/test_real_shapes.py::test_wide",
    "tests/test_blocking_shuffle.py::test_answers_equal_sort_shuffle_credit_less",
    "tests/test_blocking_shuffle.py::test_answers_equal_sort_shuffle_with_a_starved",
    "tests/test_real_shapes.py::test_stopped_executor",
    "tests/test_real_shapes.py::test_many_shuffles",
    "tests/test_blocking_shuffle.py",
    "tests/test_connect_history.py",
    "tests/test_batch_diagnosis.py::test_the_tab_json",
    "tests/test_real_shapes.py",
    "tests/test_big_rows.py",
    "tests/test_batch_diagnosis.py",
    "tests/test_packaging.py",
    "tests/test_executor_start.py",
    "tests/test_cli.py",
)


def _in_process_rank(item: pytest.Item) -> int:
    """0 for the tests that need no SparkContext in this process, 2 for those that use the shared
    session, 1 for the others."""
    names = getattr(item, "fixturenames", ())
    return 2 if "spark" in names else 0 if "without_spark_context" in names else 1


def _shared_fixtures(item: pytest.Item) -> List[str]:
    """The module, package and class fixtures ``item`` uses (an application, a cluster), each named
    by where its one instance lives (module, package or class) and its name."""
    fixtures = getattr(item, "_fixtureinfo", None)
    if fixtures is None:
        return []
    module = item.nodeid.split("::", 1)[0]
    where = {"module": module, "package": os.path.dirname(module), "class": item.nodeid.rsplit("::", 1)[0]}
    return sorted(
        f"{where[defs[-1].scope]}::{name}"
        for name, defs in fixtures.name2fixturedefs.items()
        if defs and defs[-1].scope in where
    )


def _groups(items: List[pytest.Item]) -> Dict[str, str]:
    """Each test's xdist group (by node id): the in-process session's; else, when it shares a module
    fixture (an application, a cluster) with other tests, directly or through others, the group of
    all of them, named by their module and shared fixtures; else its own node id."""
    parent: Dict[str, str] = {}

    def root(key: str) -> str:
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    shared = {item.nodeid: _shared_fixtures(item) for item in items if _in_process_rank(item) == 1}
    for keys in shared.values():
        for key in keys:
            parent.setdefault(key, key)
        for key in keys[1:]:
            parent[root(key)] = root(keys[0])
    members: Dict[str, List[str]] = {}
    for key in parent:
        members.setdefault(root(key), []).append(key)
    names = {r: "[" + ",".join(sorted(keys)) + "]" for r, keys in members.items()}
    return {
        item.nodeid: IN_PROCESS
        if item.nodeid not in shared
        else names[root(shared[item.nodeid][0])]
        if shared[item.nodeid]
        else item.nodeid
        for item in items
    }


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Runs the tests that share this process's session last, after the ones that must run before
    it, and the longest groups first (each group's tests together, in their order); in a
    pytest-xdist worker, also writes each test's group (see ``_groups``) where the scheduler reads it."""
    groups = _groups(items)

    def rank(item: pytest.Item) -> int:
        group = groups[item.nodeid]
        name = IN_PROCESS if group == IN_PROCESS else item.nodeid
        return next((i for i, start in enumerate(LONGEST_FIRST) if name.startswith(start)), len(LONGEST_FIRST))

    group_rank: Dict[str, int] = {}
    first: Dict[str, int] = {}
    for index, item in enumerate(items):
        group = groups[item.nodeid]
        group_rank[group] = min(group_rank.get(group, len(LONGEST_FIRST)), rank(item))
        first.setdefault(group, index)
    order = {item.nodeid: index for index, item in enumerate(items)}

    def key(item: pytest.Item) -> Tuple[int, int, int, int]:
        group = groups[item.nodeid]
        return group_rank[group], first[group], _in_process_rank(item), order[item.nodeid]

    items.sort(key=key)
    groups_file = os.environ.get(GROUPS_FILE)
    if groups_file and hasattr(config, "workerinput"):
        worker_copy = f"{groups_file}.{config.workerinput['workerid']}"
        with open(worker_copy, "w") as f:
            json.dump({item.nodeid: groups[item.nodeid] for item in items}, f)
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
    """pytest-xdist's scheduling by scope, with this suite's groups as scopes (``_groups``; the
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
