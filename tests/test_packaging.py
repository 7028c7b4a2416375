"""The installed distribution: the bundled plugin jar and what it contains (Sluice's classes only;
Spark, Scala and Netty come from the Spark it runs in, the benchmarks from sluice-bench), and the
wheel `pip wheel .` builds, installed into a fresh virtualenv that has no Gradle and no Java
compiler, running a shuffle."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import List, Set

import pytest
import sluice
from sessions import REPO, app_env


@pytest.fixture(scope="module")
def jar_entries() -> list[str]:
    with zipfile.ZipFile(sluice.jar_path()) as jar:
        return jar.namelist()


def test_jar_is_bundled_in_the_installed_package() -> None:
    jar = Path(sluice.jar_path())
    assert jar.is_file()
    assert jar.name == "sluice.jar" and jar.parent.name == "jars"
    site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert jar.resolve().is_relative_to(site_packages), f"{jar} is not inside {site_packages}"


def test_record_lists_the_jar() -> None:
    files = metadata.distribution("spark-sluice").files or []
    assert "sluice/jars/sluice.jar" in {file.as_posix() for file in files}


def test_package_data_is_installed() -> None:
    package = Path(sluice.__file__).resolve().parent
    assert (package / "py.typed").is_file()
    assert (package / "_options.json").is_file()
    assert (package / "_spark_rules.json").is_file()  # what `sluice doctor` checks


def test_jar_holds_sluice_classes(jar_entries: list[str]) -> None:
    assert "io/sluice/config/SluiceOptions.class" in jar_entries


@pytest.mark.parametrize("prefix", ["org/apache/spark/SparkContext", "scala/", "io/netty/"])
def test_jar_bundles_no_spark_scala_or_netty(jar_entries: list[str], prefix: str) -> None:
    assert not [entry for entry in jar_entries if entry.startswith(prefix)]


def test_version_matches_the_distribution() -> None:
    assert sluice.__version__ == metadata.version("spark-sluice")


def test_jar_holds_no_benchmark_classes(jar_entries: list[str]) -> None:
    # The benchmarks' classes (io.sluice.bench, org.apache.spark.shuffle.sluice.bench) live in
    # sluice-bench's jar.
    assert not [entry for entry in jar_entries if "/bench/" in entry or "Benchmark" in entry]


def test_package_holds_no_benchmark_modules() -> None:
    installed = [f.as_posix() for f in metadata.distribution("spark-sluice").files or []]
    assert "sluice/cli.py" in installed
    assert not [name for name in installed if "bench" in name.lower()]
    assert find_spec("sluice.bench") is None


def benchmark_imports(files: List[Path]) -> List[str]:
    """Every import of the benchmarks (sluice_bench, or the old sluice.bench) in ``files``, also
    those inside functions, as ``file: module``."""
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            found += [
                f"{path.name}: {name}"
                for name in names
                if name.split(".")[0] == "sluice_bench" or name.startswith("sluice.bench")
            ]
    return found


def test_no_module_of_the_package_imports_the_benchmarks() -> None:
    """`sluice bench` hands over to sluice-bench by name, at run time: Sluice depends on nothing
    of it."""
    package = Path(sluice.__file__).resolve().parent
    assert not benchmark_imports(sorted(package.glob("*.py")))


def test_only_the_benchmarks_own_tests_import_them() -> None:
    """Tests of Sluice borrow no helper from the benchmarks (sessions.py has the tests' own)."""
    tests = Path(__file__).resolve().parent
    found = benchmark_imports(sorted(tests.glob("*.py")))
    assert found and all(entry.startswith("test_bench.py: ") for entry in found), found


# --- the wheel, on a machine without Gradle or a JDK compiler -------------------------------

# Run by the fresh virtualenv's Python: a shuffle through Sluice (one JVM, the quickest to start).
SHUFFLE_JOB = textwrap.dedent("""
    import json
    from pyspark.sql import SparkSession, functions as F
    import sluice

    builder = SparkSession.builder.master("local[2]").appName("sluice-wheel").config("spark.ui.enabled", "false")
    spark = sluice.configure(builder.config("spark.ui.showConsoleProgress", "false")).getOrCreate()
    try:
        rows = spark.range(0, 20000, 1, 4).repartition(3, "id").agg(F.count("*"), F.sum("id")).collect()
        table = sluice.metrics(spark)
        print(json.dumps({
            "sluice": sluice.__file__, "jar": sluice.jar_path(), "answer": [list(r) for r in rows],
            "records_out": sum(table.column("numRecordsOut").to_pylist()),
            "records_in": sum(table.column("numRecordsIn").to_pylist()),
        }))
    finally:
        spark.stop()
""")


def runtime_dependencies(name: str) -> Set[str]:
    """The distributions ``name`` needs at run time (no extras), transitively, by name."""
    found: Set[str] = set()
    pending = [name]
    while pending:
        for requirement in metadata.distribution(pending.pop()).requires or []:
            if "extra ==" in requirement.replace('"', "").replace("'", ""):
                continue
            match = re.match(r"[A-Za-z0-9._-]+", requirement)
            assert match, requirement
            if match.group(0) not in found:
                found.add(match.group(0))
                pending.append(match.group(0))
    return found


def link_dependencies(names: Set[str], target: Path) -> None:
    """Links each distribution's top-level files (packages and metadata) into ``target``."""
    target.mkdir()
    for name in names:
        dist = metadata.distribution(name)
        for top in sorted({f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}):
            if not (target / top).exists():
                (target / top).symlink_to(Path(str(dist.locate_file(top))))


def run(cmd: List[str], env: dict[str, str], cwd: Path, timeout: float = 300) -> str:
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (
        f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )
    return done.stdout


def test_wheel_installs_and_shuffles_without_gradle_or_a_java_compiler(tmp_path: Path) -> None:
    """`pip wheel .` builds spark_sluice-*.whl with the plugin jar inside (here bundling the jar
    dev/build made, SLUICE_PREBUILT_JAR, instead of compiling it again); pip installs it into a
    fresh virtualenv offline (``pip --python``, so the virtualenv needs no pip of its own;
    ``--no-index``: pyspark, py4j and pyarrow are linked from this one's site-packages rather than
    downloaded), where a job shuffles through Sluice. Gradle, javac and scalac on the PATH fail
    and leave a mark: nothing may call them."""
    stubs, called = tmp_path / "stubs", tmp_path / "called"
    stubs.mkdir()
    for tool in ("gradle", "javac", "scalac"):
        (stubs / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {called}\nexit 1\n')
        (stubs / tool).chmod(0o755)
    env = app_env(PATH=f"{stubs}{os.pathsep}{os.environ['PATH']}", SLUICE_PREBUILT_JAR=sluice.jar_path())
    for leaked in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        env.pop(leaked, None)

    dist = tmp_path / "dist"
    run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(REPO)],
        env,
        tmp_path,
    )
    [wheel] = dist.glob("spark_sluice-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "sluice/jars/sluice.jar" in names
    assert not [name for name in names if "bench" in name.lower()]

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env, tmp_path)
    python = venv / "bin" / "python"
    site = Path(
        run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env, tmp_path).strip()
    )
    link_dependencies(runtime_dependencies("spark-sluice"), tmp_path / "dependencies")
    (site / "dependencies.pth").write_text(f"{tmp_path / 'dependencies'}\n")
    run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index", str(wheel)], env, tmp_path
    )

    env = dict(env, PYSPARK_PYTHON=str(python))
    assert (
        run([str(venv / "bin" / "sluice"), "--version"], env, tmp_path).strip()
        == f"sluice {sluice.__version__} (spark-sluice)"
    )
    out = json.loads(run([str(python), "-c", SHUFFLE_JOB], env, tmp_path).strip().splitlines()[-1])
    assert Path(out["sluice"]).is_relative_to(site) and Path(out["jar"]).is_relative_to(site), out
    assert out["answer"] == [[20000, sum(range(20000))]]
    # Every row crossed Sluice's shuffle once (then one partial aggregate per reducer).
    assert out["records_out"] >= 20000 and out["records_in"] >= 20000, out
    assert not called.exists(), called.read_text()
