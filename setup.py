"""Builds the JVM plugin with Gradle and ships it inside the wheel as ``sluice/jars/sluice.jar``.

Everything else about the distribution is declared in pyproject.toml. The jar is compiled
against the jars of the pyspark that is importable in the build environment (a build
requirement), so Spark, Scala and Netty are never bundled.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithJar(build_py):
    """``build_py`` that also runs ``gradle jar`` and copies the jar into the package."""

    def run(self) -> None:
        # Drop what an earlier build left behind so a removed module never reaches a wheel.
        shutil.rmtree(os.path.join(self.build_lib, "sluice"), ignore_errors=True)
        super().run()
        target = Path(self.build_lib, "sluice", "jars", "sluice.jar")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(build_jar(), target)


def pyspark_jars_dir() -> Path:
    try:
        import pyspark
    except ImportError as e:
        raise SystemExit(
            "Building Sluice needs pyspark==4.3.0 in the build environment (its jars are the "
            "JVM plugin's compile classpath): pip install pyspark==4.3.0"
        ) from e
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    if not jars.is_dir():
        raise SystemExit(f"pyspark at {jars.parent} has no jars/ folder; install pyspark==4.3.0 from PyPI")
    return jars


def build_jar() -> Path:
    gradle = shutil.which("gradle")
    if gradle is None:
        raise SystemExit(
            "Building Sluice's JVM plugin needs Gradle, which is not on PATH. "
            "Install it with: apt-get install -y gradle (or run dev/build, which does so)."
        )
    cmd = [gradle, "--no-daemon", "-q", f"-PsparkJars={pyspark_jars_dir()}", "jar"]
    print("building the JVM plugin:", " ".join(cmd), flush=True)
    result = subprocess.run(cmd, cwd=ROOT)
    if result.returncode != 0:
        raise SystemExit(f"gradle jar failed (exit {result.returncode}); see its output above")
    version = (ROOT / "VERSION").read_text().strip()
    jar = ROOT / "build" / "libs" / f"sluice-{version}.jar"
    if not jar.is_file():
        raise SystemExit(f"gradle jar succeeded but {jar} is missing")
    return jar


setup(
    cmdclass={"build_py": BuildPyWithJar},
    # Keep setuptools' own build output apart from Gradle's tree under build/.
    options={"build": {"build_base": "build/python"}},
)
