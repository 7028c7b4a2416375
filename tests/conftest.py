"""Shared pytest setup: Spark on loopback only, and always the pyspark installed with Sluice."""

from __future__ import annotations

import os

os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
os.environ.pop("SPARK_HOME", None)
