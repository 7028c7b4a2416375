"""Switching a Spark session over to Sluice: the plugin jar, the shuffle managers, the plugin and
the ``spark.sluice.*`` options, from snake_case keywords validated against the option table.

Shuffle settings are static in Spark: they are read once when the SparkContext (and each
executor) starts, so all of this has to be set on the builder before the session exists.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional

from pyspark import SparkContext
from pyspark.sql import SparkSession

from sluice import _options
from sluice._jars import jar_path

SHUFFLE_MANAGER = "org.apache.spark.shuffle.sluice.SluiceShuffleManager"
PIPELINED_SHUFFLE_MANAGER = "org.apache.spark.shuffle.sluice.SluicePipelinedShuffleManager"
PLUGIN = "org.apache.spark.shuffle.sluice.SluicePlugin"

PROMETHEUS_SERVLET = {
    "spark.metrics.conf.*.sink.prometheusServlet.class": "org.apache.spark.metrics.sink.PrometheusServlet",
    "spark.metrics.conf.*.sink.prometheusServlet.path": "/metrics/prometheus",
}

# Comma-separated lists Sluice adds itself to instead of replacing them.
APPENDED_KEYS = ("spark.jars", "spark.plugins")


def spark_conf(*, prometheus: bool = False, **options: object) -> Dict[str, str]:
    """The Spark settings that run a session on Sluice, as ``{key: value}`` strings.

    Args:
        prometheus: also switch on Spark's Prometheus servlet (``/metrics/prometheus``).
        **options: Sluice options by their Python names (see ``docs/configuration.md``), e.g.
            ``buffer_timeout="10ms"`` or ``buffers_per_channel=4``.

    Raises:
        ValueError: for an unknown option (suggesting the closest name) or an invalid value
            (naming the option, its Spark key and the value).
        FileNotFoundError: when the plugin jar cannot be found.
    """
    if not isinstance(prometheus, bool):
        raise TypeError(f"prometheus must be True or False, got {prometheus!r}")
    sluice_options = _options.spark_settings(options)
    conf = {
        "spark.jars": jar_path(),
        "spark.shuffle.manager": SHUFFLE_MANAGER,
        "spark.shuffle.manager.incremental": PIPELINED_SHUFFLE_MANAGER,
        "spark.plugins": PLUGIN,
    }
    if prometheus:
        conf.update(PROMETHEUS_SERVLET)
    conf.update(sluice_options)
    return conf


def configure(builder: SparkSession.Builder, *, prometheus: bool = False, **options: object) -> SparkSession.Builder:
    """Sets up ``builder`` to run its session's shuffles on Sluice and returns it.

    Adds the plugin jar to ``spark.jars`` and Sluice's plugin to ``spark.plugins`` (keeping what
    is there), selects Sluice's shuffle managers and sets the given Sluice options. Spark's own
    metric names stay as they are: Sluice's metrics appear in Spark's metrics system as the source
    ``sluice`` (see ``docs/metrics.md``). Example::

        builder = SparkSession.builder.master("local-cluster[2,1,1024]")
        spark = sluice.configure(builder, buffer_timeout="10ms").getOrCreate()

    Args:
        builder: ``SparkSession.builder``, before ``getOrCreate()``.
        prometheus: also switch on Spark's Prometheus servlet (``/metrics/prometheus``).
        **options: Sluice options by their Python names, as for :func:`spark_conf`.

    Raises:
        TypeError: when ``builder`` is not a ``pyspark.sql.SparkSession.Builder``.
        RuntimeError: when a SparkContext is already running, or when one ran earlier in this
            process without Sluice (its driver JVM, which outlives it, cannot load Sluice).
        ValueError: for an unknown option or an invalid value.
    """
    if not isinstance(builder, SparkSession.Builder):
        kind = type(builder)
        raise TypeError(
            "sluice.configure expects a pyspark.sql.SparkSession.Builder (SparkSession.builder), "
            f"got {kind.__module__}.{kind.__qualname__}"
        )
    if SparkContext._active_spark_context is not None:
        raise RuntimeError(
            "A SparkContext is already running. Shuffle settings are static: Spark reads them "
            "once, when the context and its executors start, so sluice.configure must be applied "
            "to the builder before the session starts: in a new Python process, or before this "
            "one starts its first SparkContext."
        )
    if not _driver_jvm_has_sluice():
        raise RuntimeError(
            "This Python process already started Spark's driver JVM without Sluice's jar (a "
            "SparkContext ran here before sluice.configure), and that JVM cannot load "
            f"{SHUFFLE_MANAGER}: jars only reach the driver's class path when its JVM starts. "
            "Run the Sluice session in a new Python process, or configure Sluice before the first "
            "session of this one."
        )
    current = builder._options
    for key, value in spark_conf(prometheus=prometheus, **options).items():
        if key in APPENDED_KEYS:
            value = append_to_list(_as_text(current.get(key)), [value])
        builder.config(key, value)
    return builder


def _driver_jvm_has_sluice() -> bool:
    """Whether the driver JVM of this process, if PySpark started one already, can load Sluice."""
    jvm = SparkContext._jvm
    if jvm is None:
        return True  # no JVM yet: it will start with spark.jars on its class path
    try:
        jvm.org.apache.spark.util.Utils.classForName(SHUFFLE_MANAGER, False, False)
    except Exception:
        return False
    return True


def append_to_list(existing: Optional[str], additions: Iterable[str]) -> str:
    """``existing`` (a comma-separated Spark list, possibly empty) followed by every addition it
    does not already hold."""
    items: List[str] = [item.strip() for item in (existing or "").split(",") if item.strip()]
    for addition in additions:
        if addition not in items:
            items.append(addition)
    return ",".join(items)


def _as_text(value: object) -> Optional[str]:
    return None if value is None else str(value)
