"""The py4j side of Sluice's driver accessor: JSON strings in, plain Python values out.

Python never holds a live JVM object of Sluice's: the driver's ``SluiceMetricsAccessor`` renders
everything as JSON, which is parsed here.
"""

from __future__ import annotations

import json
from typing import Any, Dict

from pyspark.sql import SparkSession

ACCESSOR = "org.apache.spark.shuffle.sluice.SluiceMetricsAccessor"


def call_accessor(spark: object, method: str, *args: object) -> Dict[str, Any]:
    """Calls ``SluiceMetricsAccessor.<method>(*args)`` on ``spark``'s driver and parses its JSON.

    Raises:
        TypeError: when ``spark`` is not a ``SparkSession``.
        RuntimeError: when the session does not run Sluice's plugin, or the accessor reports an
            error.
    """
    if not isinstance(spark, SparkSession):
        kind = type(spark)
        raise TypeError(
            "expected a pyspark.sql.SparkSession (classic, or a Spark Connect session), "
            f"got {kind.__module__}.{kind.__qualname__}"
        )
    jvm = spark.sparkContext._jvm
    if jvm is None:
        raise RuntimeError("the SparkSession has no driver JVM (it was stopped)")
    accessor = jvm
    for part in ACCESSOR.split("."):
        accessor = getattr(accessor, part)
    try:
        text = str(getattr(accessor, method)(*args))
    except Exception as e:  # py4j: the class is missing when the session runs without Sluice's jar
        raise RuntimeError(
            f"Sluice's metrics are not available in this session ({type(e).__name__}: {e}); start it "
            "with sluice.configure(SparkSession.builder, ...)"
        ) from e
    payload: Dict[str, Any] = json.loads(text)
    error = payload.get("error")
    if error:
        raise RuntimeError(str(error))
    return payload
