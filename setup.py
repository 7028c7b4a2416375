"""Builds the JVM plugin with Gradle and ships it inside the wheel as ``sluice/jars/sluice.jar``.

Everything else about the distribution is declared in pyproject.toml. The jar is compiled
against the jars of the pyspark that is importable in the build environment (a build
requirement), so Spark, Scala and Netty are never bundled (see jvm_build.py). With
``SLUICE_PREBUILT_JAR=<a built sluice jar>`` the wheel bundles that jar instead of running Gradle.
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from jvm_build import build_py_with_jar  # noqa: E402

VERSION = (ROOT / "VERSION").read_text().strip()

setup(
    cmdclass={
        "build_py": build_py_with_jar(
            "sluice", "sluice.jar", "jar", ROOT / "build" / "libs" / f"sluice-{VERSION}.jar", "SLUICE_PREBUILT_JAR"
        )
    },
    # Keep setuptools' own build output apart from Gradle's tree under build/.
    options={"build": {"build_base": "build/python"}},
)
