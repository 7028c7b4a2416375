"""The options of every JVM the tests start (drivers, executors, Workers, servers), through
``JAVA_TOOL_OPTIONS``, set once in the process that starts pytest's workers (they inherit it):

- C1 only (``-XX:TieredStopAtLevel=1``): each JVM lives seconds to minutes and spends more CPU
  compiling with C2 than C2's code saves it. C1 alone halves a test application's CPU time on two
  cores (47 to 26 CPU-seconds for one of test_blocking_shuffle's applications).
- A class-data archive of Spark (Java's application class-data sharing, JEP 350's dynamic
  archives): every test application's JVMs load 10,000 to 20,000 classes of Spark's jars and
  Sluice's, the same ones each time. ``run_class_archive.py`` writes them into one archive at the
  start of the run, which every JVM whose class path starts with pyspark's (drivers and executors)
  maps instead of loading, parsing and verifying them again: one two-executor application, 24 to
  15 CPU-seconds (dev/cluster's hosts leave their conf dir absent so that theirs share it too). A
  JVM with another class path (Spark's launcher, YARN's containers) or a class that
  changed since (the JDK checks each jar's size and time and each class file's checksum) loads from
  its jars as before, so it changes what runs nowhere; its warnings are off (``-Xlog:cds*=off``).
  The archive is kept under ``build/`` and written again when the JDK, pyspark's jars or Sluice's
  jar change.

Neither changes what a JVM does, only how fast it starts; the benchmarks never run with them. A
``JAVA_TOOL_OPTIONS`` set before pytest starts is kept instead, and ``SLUICE_TEST_CLASS_ARCHIVE=off``
leaves the archive out.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest
from sessions import app_env

REPO = Path(__file__).resolve().parent.parent.parent
ARCHIVE_DIR = REPO / "build" / "test-class-archive"
RUNNER = REPO / "tests" / "run_class_archive.py"
C1_ONLY = "-XX:TieredStopAtLevel=1"
ARCHIVE_TIMEOUT_S = 900


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or "JAVA_TOOL_OPTIONS" in os.environ:
        return  # a pytest-xdist worker (it inherited the options) or options chosen by whoever runs pytest
    options = [C1_ONLY]
    if os.environ.get("SLUICE_TEST_CLASS_ARCHIVE", "on") != "off":
        archive = _class_archive(config)
        if archive is not None:
            options += [f"-XX:SharedArchiveFile={archive}", "-Xlog:cds*=off"]
    os.environ["JAVA_TOOL_OPTIONS"] = " ".join(options)


def _class_archive(config: pytest.Config) -> Path | None:
    """The archive for this JDK, pyspark and Sluice jar, written first if there is none; None (and a
    line saying why) when it cannot be written: the tests then run without it, slower."""
    archive = ARCHIVE_DIR / f"spark-{_fingerprint()}.jsa"
    if archive.exists():
        return archive
    ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, str(RUNNER), "--archive", str(partial)],
            cwd=REPO / "tests",
            env=app_env(JAVA_TOOL_OPTIONS=C1_ONLY),
            capture_output=True,
            text=True,
            timeout=ARCHIVE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        _say(config, f"no class-data archive: {RUNNER.name} ran over {ARCHIVE_TIMEOUT_S} s")
        partial.unlink(missing_ok=True)
        return None
    if done.returncode != 0 or not partial.exists():
        _say(config, f"no class-data archive: {RUNNER.name} exited {done.returncode}:\n{done.stderr[-3000:]}")
        partial.unlink(missing_ok=True)
        return None
    for old in ARCHIVE_DIR.glob("spark-*.jsa"):
        old.unlink(missing_ok=True)
    os.replace(partial, archive)  # two runs at once each write their own, and one wins whole
    _say(config, f"class-data archive for the tests' JVMs written in {time.monotonic() - started:.0f} s: {archive}")
    return archive


def _fingerprint() -> str:
    """What the archive depends on: the JDK and every jar a test JVM's class path or Sluice brings."""
    import pyspark
    import sluice._jars

    java = (
        shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) if "JAVA_HOME" in os.environ else None
    )
    files: List[Path] = [Path(os.path.realpath(java or shutil.which("java") or "java"))]
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    files += sorted(jars.iterdir())
    files.append(Path(sluice._jars.jar_path()))
    digest = hashlib.sha256(RUNNER.read_bytes())
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        digest.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _say(config: pytest.Config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"[jvm_options] {line}")
    else:
        print(f"[jvm_options] {line}", file=sys.stderr)
