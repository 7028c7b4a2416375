"""Sluice: Apache Flink's network stack as a shuffle plugin for Apache Spark.

Sluice replaces Spark's shuffle transport with Flink's: records are serialised into fixed-size
network buffers, sent over credit-based flow control so each channel is backpressured on its
own, flushed after a configurable buffer timeout, and measured with Flink's network metrics.

Use :func:`configure` on a ``SparkSession.builder`` before the session starts::

    from pyspark.sql import SparkSession
    import sluice

    spark = sluice.configure(SparkSession.builder, buffer_timeout="10ms").getOrCreate()

and read Flink's network metrics back as pyarrow tables with :func:`metrics` (per task),
:func:`stages` (per stage, with the batch diagnosis), :func:`executors` and :func:`backpressure`.
"""

from sluice._jars import jar_path
from sluice._version import __version__
from sluice.config import configure
from sluice.monitoring import backpressure, executors, metrics, stages

__all__ = ["configure", "metrics", "stages", "executors", "backpressure", "jar_path", "__version__"]
