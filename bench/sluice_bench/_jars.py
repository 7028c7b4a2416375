"""Where the benchmark jar is: inside the installed sluice-bench, or in a source checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def bench_jar_path() -> str:
    """Returns the absolute path of the benchmark jar (``io.sluice.bench.*`` and
    ``org.apache.spark.shuffle.sluice.bench.*``), which goes on the class path beside the plugin
    jar whenever a benchmark runs.

    An installed sluice-bench carries it as ``sluice_bench/jars/sluice-bench.jar``; running from a
    source checkout without it, Gradle's ``build/bench-libs/sluice-bench.jar`` is used instead.

    Raises:
        FileNotFoundError: when neither exists.
    """
    bundled = _PACKAGE_DIR / "jars" / "sluice-bench.jar"
    if bundled.is_file():
        return str(bundled)
    built = _PACKAGE_DIR.parent.parent / "build" / "bench-libs" / "sluice-bench.jar"
    if built.is_file():
        return str(built)
    raise FileNotFoundError(
        f"The benchmark jar is missing: neither {bundled} nor {built} exists. Install sluice-bench "
        "with `pip install ./bench` from the repository (or run dev/build), which builds it with Gradle."
    )
