"""The suite's own deadline (plugins/deadline.py): a test phase that hangs fails, saying so, once its
deadline passes, and every process it started is killed (here a stand-in for an application that
left its own process group behind), while the processes that were there before are left alone."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import processes

HERE = Path(__file__).resolve().parent

HANGING = textwrap.dedent("""
    import subprocess, time
    import pytest

    @pytest.mark.timeout(3)
    def test_hangs(tmp_path_factory):
        # An "application" in a session of its own, with a child of its own, then a hang.
        app = subprocess.Popen(["bash", "-c", "sleep 300 & echo $! > {pids}.child; wait"], start_new_session=True)
        with open("{pids}", "w") as f:
            f.write(str(app.pid))
        time.sleep(120)

    def test_after_it():
        pass
""")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_hung_test_fails_at_its_deadline_and_what_it_started_is_killed(tmp_path: Path) -> None:
    for helper in ("conftest.py", "processes.py", "sessions.py"):
        shutil.copy(HERE / helper, tmp_path / helper)
    shutil.copytree(HERE / "plugins", tmp_path / "plugins", ignore=shutil.ignore_patterns("__pycache__"))
    pids = tmp_path / "pids"
    (tmp_path / "test_hanging.py").write_text(HANGING.replace("{pids}", str(pids)))
    bystander = subprocess.Popen(["sleep", "300"])  # this process's child from before: not the test's
    try:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(tmp_path)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        took = time.monotonic() - started
        assert done.returncode == 1, done.stdout[-3000:]
        assert "1 failed, 1 passed" in done.stdout, done.stdout[-3000:]
        assert "test_hangs (call) ran past its deadline of 3s" in done.stdout, done.stdout[-3000:]
        assert took < 60, f"the hung test held the run for {took:.0f}s"
        app, child = int(pids.read_text()), int(Path(f"{pids}.child").read_text())
        assert not alive(app) and not alive(child), "the hung test's processes outlived it"
        assert alive(bystander.pid) and bystander.pid in {pid for pid, _ in processes.descendants()}
    finally:
        bystander.kill()
        bystander.wait()
    assert bystander.pid not in {pid for pid, _ in processes.descendants()}
