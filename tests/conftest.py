"""Shared pytest setup: Spark on loopback only, and always the pyspark installed with Sluice."""

from __future__ import annotations

import os

os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
os.environ.pop("SPARK_HOME", None)

import sys
from typing import Iterator

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Two executor JVMs with two cores each: remote channels between them, and room for the four
# concurrent tasks (2 map + 2 reduce) of a Real-Time Mode query with two shuffle partitions.
CLUSTER_MASTER = os.environ.get("SLUICE_TEST_CLUSTER_MASTER", "local-cluster[2,2,1024]")


@pytest.fixture(scope="session")
def sluice_spark() -> Iterator["SparkSession"]:
    """One SparkSession on Sluice for every in-process Spark test (start-up costs ~13 s)."""
    from pyspark.sql import SparkSession

    import sluice

    builder = (
        SparkSession.builder.master(CLUSTER_MASTER)
        .appName("sluice-tests")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.realTimeMode.allowlistCheck", "false")
        .config("spark.executor.memory", "900m")
    )
    spark = sluice.configure(builder, prometheus=True, buffer_timeout="5ms").getOrCreate()
    try:
        yield spark
    finally:
        spark.stop()
