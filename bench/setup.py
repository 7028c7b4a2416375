"""Builds the benchmark jar with the repository's Gradle build (``gradle benchJar``) and ships it
inside the wheel as ``sluice_bench/jars/sluice-bench.jar``; the version is the repository's.

Everything else is declared in pyproject.toml. sluice-bench is built from a Sluice source
checkout (its JVM classes compile against the plugin's; see ../jvm_build.py). With
``SLUICE_BENCH_PREBUILT_JAR=<a built sluice-bench.jar>`` the wheel bundles that jar instead of
running Gradle.
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import setup

REPO = Path(__file__).resolve().parent.parent
if not (REPO / "jvm_build.py").is_file():
    raise SystemExit(f"sluice-bench is built from a Sluice source checkout, and {REPO} is not one")
sys.path.insert(0, str(REPO))

from jvm_build import build_py_with_jar  # noqa: E402

setup(
    version=(REPO / "VERSION").read_text().strip(),
    cmdclass={
        "build_py": build_py_with_jar(
            "sluice_bench",
            "sluice-bench.jar",
            "benchJar",
            REPO / "build" / "bench-libs" / "sluice-bench.jar",
            "SLUICE_BENCH_PREBUILT_JAR",
        )
    },
    # setuptools' build output beside the plugin's, under the repository's build/.
    options={"build": {"build_base": str(REPO / "build" / "python-bench")}},
)
