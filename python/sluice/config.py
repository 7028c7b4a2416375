"""Switching a Spark session over to Sluice: the plugin jar, the shuffle managers, the plugin and
the ``spark.sluice.*`` options, from snake_case keywords validated against the option table.

Shuffle settings are static in Spark: they are read once when the SparkContext (and each
executor) starts, so all of this has to be set on the builder before the session exists. A Spark
Connect client cannot set them at all (SPARK-44981): they go on the Connect server's command line
(``sluice connect-server``), and :func:`configure` refuses a builder for a remote session.

Nothing here imports PySpark's classic core (``pyspark.core``) at import time, so ``import sluice``
works with the ``pyspark-client`` distribution, which has none.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Dict, Iterable, List, Mapping, Optional

from pyspark.sql import SparkSession

from sluice import _options
from sluice._jars import jar_path
from sluice._typed_options import SluiceOptions

if TYPE_CHECKING:
    from typing_extensions import Unpack

SHUFFLE_MANAGER = "org.apache.spark.shuffle.sluice.SluiceShuffleManager"
PIPELINED_SHUFFLE_MANAGER = "org.apache.spark.shuffle.sluice.SluicePipelinedShuffleManager"
PLUGIN = "org.apache.spark.shuffle.sluice.SluicePlugin"
# Tells Spark whether map outputs outlive their executor (they do with Sluice's node shuffle service).
SHUFFLE_DATA_IO = "org.apache.spark.shuffle.sluice.SluiceShuffleDataIO"

# Spark's Prometheus servlet for the application's two metrics instances, named one by one rather
# than as `*`, so that no printed argument is a shell glob (`spark-submit $(sluice conf)`).
PROMETHEUS_SERVLET = {
    f"spark.metrics.conf.{instance}.sink.prometheusServlet.{key}": value
    for instance in ("driver", "executor")
    for key, value in (
        ("class", "org.apache.spark.metrics.sink.PrometheusServlet"),
        ("path", "/metrics/prometheus"),
    )
}

# With Sluice's node shuffle service, dynamic allocation needs no shuffle tracking, but Spark's
# ExecutorMonitor tracks shuffles whenever spark.shuffle.service.enabled is false and
# shuffleTracking.enabled is (its default) true, whatever the storage plugin says, and then keeps
# every executor holding map outputs until their shuffle is dropped. A user's own value stands
# (configure keeps one already on the builder).
SERVICE_ALLOCATION = {"spark.dynamicAllocation.shuffleTracking.enabled": "false"}

# Comma-separated lists Sluice adds itself to instead of replacing them.
APPENDED_KEYS = ("spark.jars", "spark.plugins")


def spark_conf(*, prometheus: bool = False, **options: Unpack[SluiceOptions]) -> Dict[str, str]:
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
    return settings_conf(options, prometheus=prometheus)


def settings_conf(
    options: Mapping[str, object], *, prometheus: bool = False, require_unit: bool = False
) -> Dict[str, str]:
    """:func:`spark_conf` of ``options`` (Python names), for callers holding them as a mapping (the
    command line, which also requires units: ``require_unit``, see ``_options.UNIT_RULE``)."""
    if not isinstance(prometheus, bool):
        raise TypeError(f"prometheus must be True or False, got {prometheus!r}")
    sluice_options = _options.spark_settings(options, require_unit=require_unit)
    conf = {
        "spark.jars": jar_path(),
        "spark.shuffle.manager": SHUFFLE_MANAGER,
        "spark.shuffle.manager.incremental": PIPELINED_SHUFFLE_MANAGER,
        "spark.shuffle.sort.io.plugin.class": SHUFFLE_DATA_IO,
        "spark.plugins": PLUGIN,
    }
    if prometheus:
        conf.update(PROMETHEUS_SERVLET)
    conf.update(sluice_options)
    if sluice_options.get(_options.options()["service_enabled"].key, "").lower() == "true":
        conf.update(SERVICE_ALLOCATION)
    return conf


def configure(
    builder: SparkSession.Builder, *, prometheus: bool = False, **options: Unpack[SluiceOptions]
) -> SparkSession.Builder:
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
        RuntimeError: when ``builder`` is for a Spark Connect server (``.remote("sc://...")``,
            ``SPARK_REMOTE``, a Connect-only PySpark, or Spark Connect's own builder), whose
            settings only its command line can set; when a SparkContext is already running, or
            when one ran earlier in this process without Sluice (its driver JVM, which outlives
            it, cannot load Sluice).
        ValueError: for an unknown option or an invalid value.
    """
    remote = remote_target(builder)
    if remote is not None:
        raise RuntimeError(
            f"sluice.configure cannot switch on Sluice for a Spark Connect session ({remote}): shuffle "
            "settings are static, read when the server's SparkContext starts, and a Connect client "
            "cannot set them (SPARK-44981). They go on the Connect server's command line: start it "
            "with `sluice connect-server --master ... [--buffer-timeout 10ms ...]`, or add the "
            "arguments `sluice conf [...]` prints to start-connect-server.sh; then connect with "
            "SparkSession.builder.remote(...).getOrCreate() as usual, and sluice.metrics(spark) and "
            "sluice.backpressure(spark) read the server's figures."
        )
    if not isinstance(builder, SparkSession.Builder):
        kind = type(builder)
        raise TypeError(
            "sluice.configure expects a pyspark.sql.SparkSession.Builder (SparkSession.builder), "
            f"got {kind.__module__}.{kind.__qualname__}"
        )
    from pyspark import SparkContext

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
    for key, value in settings_conf(options, prometheus=prometheus).items():
        if key in SERVICE_ALLOCATION and key in current:
            continue
        if key in APPENDED_KEYS:
            value = append_to_list(_as_text(current.get(key)), [value])
        builder.config(key, value)
    return builder


def remote_target(builder: object) -> Optional[str]:
    """What makes ``builder`` build a session of a Spark Connect server, or None for a classic one:
    Spark Connect's own builder class, a ``spark.remote`` / ``SPARK_REMOTE`` of ``sc://...``, or
    a PySpark without its classic core (the ``pyspark-client`` distribution)."""
    kind = type(builder)
    if kind.__module__.startswith("pyspark.sql.connect."):
        return f"the builder is {kind.__module__}.{kind.__qualname__}"
    options = getattr(builder, "_options", None)
    url = options.get("spark.remote") if isinstance(options, dict) else None
    if url is None:
        url = os.environ.get("SPARK_REMOTE")
    if url is not None and str(url).startswith("sc://"):
        return f"spark.remote={url}"
    from pyspark.util import is_remote_only

    if is_remote_only():
        return "this PySpark is the Spark Connect client only (pyspark-client)"
    return None


def _driver_jvm_has_sluice() -> bool:
    """Whether the driver JVM of this process, if PySpark started one already, can load Sluice."""
    from pyspark import SparkContext

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
