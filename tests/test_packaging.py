"""The installed distribution: the bundled plugin jar and what it contains (Sluice's classes only;
Spark, Scala and Netty come from the Spark it runs in)."""

from __future__ import annotations

import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

import sluice


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


def test_jar_holds_sluice_classes(jar_entries: list[str]) -> None:
    assert "io/sluice/config/SluiceOptions.class" in jar_entries


@pytest.mark.parametrize("prefix", ["org/apache/spark/SparkContext", "scala/", "io/netty/"])
def test_jar_bundles_no_spark_scala_or_netty(jar_entries: list[str], prefix: str) -> None:
    assert not [entry for entry in jar_entries if entry.startswith(prefix)]


def test_version_matches_the_distribution() -> None:
    assert sluice.__version__ == metadata.version("spark-sluice")
