"""The Spark Connect side of Sluice's driver accessor: the plugin's ``sluice-metrics`` data source.

A Connect client has no py4j and no driver JVM of its own, so it reads the same JSON the classic
session gets over py4j (``SluiceMetricsAccessor``) as a one-row DataFrame that the Connect server
renders when it plans the read: ``spark.read.format("sluice-metrics").option("view", ...)``.
Nothing here imports Spark Connect's modules, so ``import sluice`` works with or without them.
"""

from __future__ import annotations

import json
from typing import Any, Dict

DATA_SOURCE = "sluice-metrics"
# The class behind the short name, for the error message when the server does not have it.
DATA_SOURCE_CLASS = "org.apache.spark.shuffle.sluice.SluiceMetricsDataSource"


def is_connect_session(spark: object) -> bool:
    """Whether ``spark`` is a Spark Connect session (``pyspark.sql.connect.session.SparkSession``),
    told by its class so that the Connect client's modules are never imported here."""
    return any(
        cls.__module__ == "pyspark.sql.connect.session" and cls.__name__ == "SparkSession"
        for cls in type(spark).__mro__
    )


def read_json(spark: Any, **options: object) -> Dict[str, Any]:
    """Reads ``sluice-metrics`` with ``options`` on the Connect server and parses its JSON.

    Raises:
        RuntimeError: when the server does not run Sluice (its jar or its plugin is missing), or
            the plugin reports an error.
    """
    reader = spark.read.format(DATA_SOURCE)
    for key, value in options.items():
        reader = reader.option(key, str(value).lower() if isinstance(value, bool) else str(value))
    try:
        rows = reader.load().collect()
    except Exception as e:  # pyspark.errors: the data source is unknown when the server lacks the jar
        raise RuntimeError(
            f"Sluice's metrics are not available from this Spark Connect server ({type(e).__name__}: "
            f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}); start the server with Sluice: "
            "`sluice connect-server --master ...`, or start-connect-server.sh with the arguments of "
            f"`sluice conf` (its jar provides the data source {DATA_SOURCE!r}, {DATA_SOURCE_CLASS})"
        ) from e
    if len(rows) != 1:
        raise RuntimeError(f"the {DATA_SOURCE!r} data source returned {len(rows)} rows instead of one")
    payload: Dict[str, Any] = json.loads(rows[0][0])
    error = payload.get("error")
    if error:
        raise RuntimeError(f"{error} (on the Spark Connect server: set these on its command line)")
    return payload
