"""Sluice: Apache Flink's network stack as a shuffle plugin for Apache Spark.

Sluice replaces Spark's shuffle transport with Flink's: records are serialised into fixed-size
network buffers, sent over credit-based flow control so each channel is backpressured on its
own, flushed after a configurable buffer timeout, and measured with Flink's network metrics.

Use :func:`configure` on a ``SparkSession.builder`` before the session starts::

    from pyspark.sql import SparkSession
    import sluice

    spark = sluice.configure(SparkSession.builder, buffer_timeout="10ms").getOrCreate()

(:func:`spark_conf` gives the same settings as a dict, for a builder or a file of your own), read
Flink's network metrics back as pyarrow tables with :func:`metrics` (per task), :func:`stages` (per
stage, with its diagnosis), :func:`executors` and :func:`backpressure`, and check a running
session's configuration with :func:`doctor`.
"""

from sluice._doctor import Finding, doctor
from sluice._jars import jar_path
from sluice._typed_options import SluiceOptions
from sluice._version import __version__
from sluice.config import configure, spark_conf
from sluice.monitoring import backpressure, executors, metrics, stages

__all__ = [
    "configure",
    "spark_conf",
    "SluiceOptions",
    "metrics",
    "stages",
    "executors",
    "backpressure",
    "doctor",
    "Finding",
    "jar_path",
    "__version__",
]
