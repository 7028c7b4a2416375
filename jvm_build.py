"""How the Python distributions get their jars: Gradle, run from the repository root, compiles
them against the jars of the pyspark importable in the build environment (Spark, Scala and Netty
are never bundled). Used by setup.py (the plugin jar of spark-sluice) and bench/setup.py (the
benchmark jar of sluice-bench); not part of either distribution.

Either build can bundle a jar built earlier instead of running Gradle, named by an environment
variable (``SLUICE_PREBUILT_JAR`` for the plugin jar, ``SLUICE_BENCH_PREBUILT_JAR`` for the
benchmark jar), e.g. to build a wheel again from the jar dev/build made.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def build_py_with_jar(package: str, name: str, task: str, jar: Path, prebuilt_variable: str) -> Any:
    """A ``build_py`` command that also puts the jar (see :func:`built_jar`) into the package as
    ``<package>/jars/<name>``."""

    class BuildPyWithJar(build_py):
        def run(self) -> None:
            # Drop what an earlier build left behind so a removed module never reaches a wheel.
            shutil.rmtree(os.path.join(self.build_lib, package), ignore_errors=True)
            super().run()
            target = Path(self.build_lib, package, "jars", name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(built_jar(task, jar, prebuilt_variable), target)

    return BuildPyWithJar


def built_jar(task: str, jar: Path, prebuilt_variable: str) -> Path:
    """The jar Gradle's ``task`` writes to ``jar`` (built now), or the prebuilt jar named by the
    environment variable ``prebuilt_variable``. Exits with a message naming what is missing."""
    prebuilt = os.environ.get(prebuilt_variable)
    if prebuilt:
        if not Path(prebuilt).is_file():
            raise SystemExit(f"{prebuilt_variable}={prebuilt} is not a file")
        print(f"bundling the prebuilt jar {prebuilt} ({prebuilt_variable})", flush=True)
        return Path(prebuilt)
    gradle = shutil.which("gradle")
    if gradle is None:
        raise SystemExit(
            "Building Sluice's jars needs Gradle, which is not on PATH. "
            "Install it with: apt-get install -y gradle (or run dev/build, which does so)."
        )
    cmd = [gradle, "--no-daemon", "-q", f"-PsparkJars={pyspark_jars_dir()}", task]
    print("building with Gradle:", " ".join(cmd), flush=True)
    result = subprocess.run(cmd, cwd=ROOT)
    if result.returncode != 0:
        raise SystemExit(f"gradle {task} failed (exit {result.returncode}); see its output above")
    if not jar.is_file():
        raise SystemExit(f"gradle {task} succeeded but {jar} is missing")
    return jar


def pyspark_jars_dir() -> Path:
    try:
        import pyspark
    except ImportError as e:
        raise SystemExit(
            "Building Sluice needs pyspark==4.3.0 in the build environment (its jars are the "
            "JVM classes' compile classpath): pip install pyspark==4.3.0"
        ) from e
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    if not jars.is_dir():
        raise SystemExit(f"pyspark at {jars.parent} has no jars/ folder; install pyspark==4.3.0 from PyPI")
    return jars
